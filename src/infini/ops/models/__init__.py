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
from .llama import LlamaModel
from .sampling import Sampler
from .scheduler import Scheduler, Sequence

__all__ = [
    "LayerWeights",
    "LlamaCheckpoint",
    "LlamaConfig",
    "LlamaModel",
    "PagedKVCache",
    "QuantisedMatrix",
    "Sampler",
    "Scheduler",
    "Sequence",
    "Tokenizer",
    "load_gguf",
    "load_tokenizer",
    "model_cache_dir",
    "smollm2_path",
]
