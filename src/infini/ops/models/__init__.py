"""Models built from `infini.ops` operators.

`infini.ops.models` runs decoder-only language models read from GGUF files,
of the families in `FAMILIES` (Llama, Gemma-3; `load_model(path)` builds
either from the file's ``general.architecture``): `validate_gguf` checks a
file (a damaged one raises `ModelFileError`), `load_gguf` dequantises the
weights (or keeps the file's quantised blocks), `DecoderModel` (also named
`LlamaModel`) holds them with a paged KV cache and runs the forward pass as
operator calls, `Scheduler` batches many sequences continuously and
`Sampler` picks tokens. See `examples/generate.py`.
"""

from .decoder import DecoderModel, load_model
from .families import FAMILIES, SUPPORTED_ARCHITECTURES, ModelConfig, ModelFamily
from .gguf_loader import (
    LayerWeights,
    LlamaCheckpoint,
    LlamaConfig,
    QuantisedMatrix,
    Tokenizer,
    gemma3_path,
    load_gguf,
    load_tokenizer,
    model_cache_dir,
    smollm2_path,
)
from .gguf_validation import ModelFileError, validate_gguf
from .kv_cache import PagedKVCache
from .llama import LlamaModel, StepInputs
from .sampling import Sampler
from .scheduler import Scheduler, Sequence

# Every operator the runner calls (`DecoderModel`, `Sampler`): the set that
# `python -m infini.ops precompile --models` (and so a default `pip install`)
# compiles ahead. `tests/test_model_llama.py` checks it against the sources.
OPERATORS = (
    "cast",
    "embedding",
    "fused_add_rms_norm",
    "gelu_tanh_and_mul",
    "ggml_dequantize",
    "ggml_interleave",
    "ggml_mul_mat_a8",
    "ggml_mul_mat_interleaved_a8",
    "ggml_mul_mat_vec_a8",
    "linear",
    "mul",
    "paged_attention_infinilm",
    "paged_attention_prefill_infinilm",
    "paged_caching_infinilm",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "top_k_top_p_sampling_from_logits",
)

__all__ = [
    "FAMILIES",
    "OPERATORS",
    "SUPPORTED_ARCHITECTURES",
    "DecoderModel",
    "LayerWeights",
    "LlamaCheckpoint",
    "LlamaConfig",
    "LlamaModel",
    "ModelConfig",
    "ModelFamily",
    "ModelFileError",
    "PagedKVCache",
    "QuantisedMatrix",
    "Sampler",
    "Scheduler",
    "Sequence",
    "StepInputs",
    "Tokenizer",
    "gemma3_path",
    "load_gguf",
    "load_model",
    "load_tokenizer",
    "model_cache_dir",
    "smollm2_path",
    "validate_gguf",
]
