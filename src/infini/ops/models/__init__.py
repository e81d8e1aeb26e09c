"""Models built from `infini.ops` operators.

`infini.ops.models` runs Llama-architecture language models read from GGUF
files: `load_gguf` dequantises the weights (or keeps the file's 4-bit
blocks), `LlamaModel` holds them with a paged KV cache and runs the forward
pass as operator calls, `Scheduler` batches many sequences continuously and
`Sampler` picks tokens. See
`examples/generate.py`.
"""

from .gguf_loader import (
    LayerWeights,
    LlamaCheckpoint,
    LlamaConfig,
    QuantisedMatrix,
    Tokenizer,
    load_gguf,
    load_tokenizer,
    model_cache_dir,
    smollm2_path,
)
from .kv_cache import PagedKVCache
from .llama import LlamaModel, StepInputs
from .sampling import Sampler
from .scheduler import Scheduler, Sequence

# Every operator the runner calls (`LlamaModel`, `Sampler`): the set that
# `python -m infini.ops precompile --models` (and so a default `pip install`)
# compiles ahead. `tests/test_model_llama.py` checks it against the sources.
OPERATORS = (
    "cast",
    "embedding",
    "fused_add_rms_norm",
    "ggml_dequantize",
    "ggml_mul_mat_a8",
    "ggml_mul_mat_vec_a8",
    "linear",
    "paged_attention_infinilm",
    "paged_attention_prefill_infinilm",
    "paged_caching_infinilm",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "top_k_top_p_sampling_from_logits",
)

__all__ = [
    "OPERATORS",
    "LayerWeights",
    "LlamaCheckpoint",
    "LlamaConfig",
    "LlamaModel",
    "PagedKVCache",
    "QuantisedMatrix",
    "Sampler",
    "Scheduler",
    "Sequence",
    "StepInputs",
    "Tokenizer",
    "load_gguf",
    "load_tokenizer",
    "model_cache_dir",
    "smollm2_path",
]
