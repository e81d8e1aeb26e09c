"""Tiny Llama GGUF files written with the `gguf` package, and the byte
positions of their header fields, for the tests of damaged model files and
of the command line.

The tokenizer is GPT-2 style byte-level BPE with no merges: its 256 tokens
are the bytes, so any text has tokens, one per byte.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

SIZES = {
    "vocab_size": 256,
    "embedding_length": 64,
    "feed_forward_length": 128,
    "block_count": 2,
    "head_count": 4,
    "head_count_kv": 2,
    "context_length": 32,
}
HEAD_DIM = SIZES["embedding_length"] // SIZES["head_count"]


def byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet: printable Latin-1 bytes stand for
    themselves, the others for the characters from U+0100 on, in order."""
    kept = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    shifted = [byte for byte in range(256) if byte not in kept]
    table = {byte: chr(byte) for byte in kept}
    table.update({byte: chr(256 + index) for index, byte in enumerate(shifted)})
    return [table[byte] for byte in range(256)]


def tensor_shapes(layers: int = SIZES["block_count"]) -> dict[str, tuple[int, ...]]:
    """The tensors of the tiny Llama in NumPy order (rows first)."""
    hidden, ffn = SIZES["embedding_length"], SIZES["feed_forward_length"]
    query = SIZES["head_count"] * HEAD_DIM
    key_value = SIZES["head_count_kv"] * HEAD_DIM
    shapes = {
        "token_embd.weight": (SIZES["vocab_size"], hidden),
        "output_norm.weight": (hidden,),
    }
    for layer in range(layers):
        prefix = f"blk.{layer}."
        shapes.update(
            {
                prefix + "attn_norm.weight": (hidden,),
                prefix + "attn_q.weight": (query, hidden),
                prefix + "attn_k.weight": (key_value, hidden),
                prefix + "attn_v.weight": (key_value, hidden),
                prefix + "attn_output.weight": (hidden, query),
                prefix + "ffn_norm.weight": (hidden,),
                prefix + "ffn_gate.weight": (ffn, hidden),
                prefix + "ffn_up.weight": (ffn, hidden),
                prefix + "ffn_down.weight": (hidden, ffn),
            }
        )
    return shapes


def write_tiny_llama(
    path: Path,
    *,
    architecture: str = "llama",
    quantised: bool = False,
    shapes: dict[str, tuple[int, ...]] | None = None,
    omit: tuple[str, ...] = (),
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Writes the tiny Llama to `path` (with `quantised`, its matrices as
    Q8_0 blocks; `shapes` overrides some tensors' shapes, `omit` leaves
    tensors out) and returns the float32 values the file holds, by name."""
    import gguf

    generator = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_context_length(SIZES["context_length"])
    writer.add_embedding_length(SIZES["embedding_length"])
    writer.add_feed_forward_length(SIZES["feed_forward_length"])
    writer.add_block_count(SIZES["block_count"])
    writer.add_head_count(SIZES["head_count"])
    writer.add_head_count_kv(SIZES["head_count_kv"])
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(SIZES["vocab_size"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(byte_tokens())
    writer.add_token_types([gguf.TokenType.NORMAL] * SIZES["vocab_size"])
    writer.add_token_scores([0.0] * SIZES["vocab_size"])
    writer.add_token_merges([])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    values = {}
    for name, shape in {**tensor_shapes(), **(shapes or {})}.items():
        if name in omit:
            continue
        array = (generator.standard_normal(shape) * 0.1).astype(np.float32)
        if quantised and len(shape) == 2:
            kind = gguf.GGMLQuantizationType.Q8_0
            blocks = gguf.quants.quantize(array, kind)
            writer.add_tensor(name, blocks, raw_dtype=kind)
            array = gguf.quants.dequantize(blocks, kind).reshape(shape)
        else:
            writer.add_tensor(name, array)
        values[name] = array
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return values


def save_byte_tokenizer(path: Path) -> None:
    """Writes the tiny model's tokenizer in `tokenizers`' JSON form (what
    `load_tokenizer` keeps in the model cache), so that a test needs no
    conversion by transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocabulary = {token: index for index, token in enumerate(byte_tokens())}
    backend = Tokenizer(models.BPE(vocab=vocabulary, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    path.parent.mkdir(parents=True, exist_ok=True)
    backend.save(str(path))


def tensor_fields(data: bytes, name: str) -> dict[str, int]:
    """Byte positions of the fields of tensor `name`'s table entry:
    ``dims`` (the first dimension), ``type`` and ``offset``; ``ndims`` its
    dimension count."""
    encoded = name.encode()
    position = data.index(struct.pack("<Q", len(encoded)) + encoded) + 8
    position += len(encoded)
    ndims = struct.unpack_from("<I", data, position)[0]
    return {
        "ndims": ndims,
        "dims": position + 4,
        "type": position + 4 + 8 * ndims,
        "offset": position + 8 + 8 * ndims,
    }


def patched(data: bytes, position: int, layout: str, value: int) -> bytes:
    """`data` with the `struct` `layout` at `position` set to `value`."""
    buffer = bytearray(data)
    struct.pack_into(layout, buffer, position, value)
    return bytes(buffer)
