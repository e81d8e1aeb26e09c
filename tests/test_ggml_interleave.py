import numpy as np
import pytest
import torch

import infini.ops
from tests._ggml import blocks

TYPES = (2, 3, 6, 7, 8, 12, 14)
# (name, byte offset, bytes) of each field of one row's block, the file's
# layout (`infini.ops.base._ggml`); the codes are the rest.
FIELDS = {
    2: (("d", 0, 2),),
    3: (("d", 0, 2), ("m", 2, 2)),
    6: (("d", 0, 2), ("qh", 2, 4)),
    7: (("d", 0, 2), ("m", 2, 2), ("qh", 4, 4)),
    8: (("d", 0, 2),),
}
BLOCK_BYTES = {2: 18, 3: 20, 6: 22, 7: 24, 8: 34}


def _k4_scale_min(scales: bytes, j: int) -> tuple[int, int]:
    """Q4_K's 6-bit scale and min of group `j` (`infini.ops.base._ggml`)."""
    if j < 4:
        return scales[j] & 63, scales[j + 4] & 63
    scale = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4)
    minimum = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4)
    return scale, minimum


def _reference_q4_k(weight: np.ndarray) -> np.ndarray:
    rows, width = weight.shape
    out = bytearray()
    for tile in range(rows // 8):
        for block in range(width // 144):
            parts = [
                bytes(weight[8 * tile + r, 144 * block : 144 * (block + 1)])
                for r in range(8)
            ]
            out += b"".join(part[0:2] for part in parts)
            out += b"".join(part[2:4] for part in parts)
            for j in range(8):
                pairs = [_k4_scale_min(part[4:16], j) for part in parts]
                for which in (0, 1):
                    values = [pair[which] for pair in pairs]
                    low = sum((v & 15) << (4 * r) for r, v in enumerate(values))
                    top = sum((v >> 4) << (2 * r) for r, v in enumerate(values))
                    out += low.to_bytes(4, "little") + top.to_bytes(2, "little")
            for pair in range(4):
                for step in range(8):
                    at = 16 + 32 * pair + 4 * step
                    out += b"".join(part[at : at + 4] for part in parts)
    return np.frombuffer(bytes(out), np.uint8).reshape(rows, width)


def _reference_q6_k(weight: np.ndarray) -> np.ndarray:
    rows, width = weight.shape
    out = bytearray()
    for tile in range(rows // 8):
        for block in range(width // 210):
            parts = [
                bytes(weight[8 * tile + r, 210 * block : 210 * (block + 1)])
                for r in range(8)
            ]
            out += b"".join(part[208:210] for part in parts)
            for t in range(16):
                out += bytes(part[192 + t] for part in parts)
            for h in range(2):
                for step in range(8):
                    for at in (64 * h + 4 * step, 64 * h + 32 + 4 * step):
                        out += b"".join(part[at : at + 4] for part in parts)
                    at = 128 + 32 * h + 4 * step
                    out += b"".join(part[at : at + 4] for part in parts)
    return np.frombuffer(bytes(out), np.uint8).reshape(rows, width)


def _reference(weight: np.ndarray, quant_type: int) -> np.ndarray:
    """The interleaved layout written out byte by byte from its description
    (`infini.ops.base.ggml_interleave`)."""
    if quant_type == 12:
        return _reference_q4_k(weight)
    if quant_type == 14:
        return _reference_q6_k(weight)
    rows, width = weight.shape
    size = BLOCK_BYTES[quant_type]
    code_at = sum(length for _, _, length in FIELDS[quant_type])
    out = bytearray()
    for tile in range(rows // 8):
        for block in range(width // size):
            parts = [
                weight[8 * tile + r, block * size : (block + 1) * size]
                for r in range(8)
            ]
            for name, at, length in FIELDS[quant_type]:
                for part in parts:
                    field = part[at : at + length]
                    if name != "qh":
                        out += bytes(field)
                        continue
                    word = int.from_bytes(bytes(field), "little")
                    moved = 0
                    for i in range(4):
                        for b in range(8):
                            value = 4 * b + i if b < 4 else 16 + 4 * (b - 4) + i
                            moved |= ((word >> value) & 1) << (8 * i + b)
                    out += moved.to_bytes(4, "little")
            codes = [part[code_at:] for part in parts]
            for step in range(len(codes[0]) // 4):
                for row_codes in codes:
                    out += bytes(row_codes[4 * step : 4 * step + 4])
    return np.frombuffer(bytes(out), np.uint8).reshape(rows, width)


@pytest.mark.parametrize("quant_type", TYPES)
def test_ggml_interleave(quant_type, device, implementation_index):
    cols = 512 if quant_type in (12, 14) else 96
    weight = blocks(quant_type, 16, cols, seed=quant_type)
    if quant_type in (6, 7, 12):
        # Random bytes: every high bit and every 6-bit scale and min (the
        # quantiser's are correlated).
        generator = np.random.default_rng(1)
        weight = torch.from_numpy(
            generator.integers(0, 256, weight.shape, dtype=np.uint8)
        )
    out = torch.full_like(weight, 7)
    infini.ops.ggml_interleave(
        weight, quant_type, out, implementation_index=implementation_index
    )
    expected = _reference(weight.numpy(), quant_type)
    assert np.array_equal(out.numpy(), expected)


@pytest.mark.parametrize("quant_type", (3, 6))
def test_ggml_interleave_in_place(quant_type, device, implementation_index):
    weight = blocks(quant_type, 8, 64, seed=2)
    expected = _reference(weight.numpy(), quant_type)
    infini.ops.ggml_interleave(
        weight, quant_type, weight, implementation_index=implementation_index
    )
    assert np.array_equal(weight.numpy(), expected)


def test_ggml_interleave_empty(device, implementation_index):
    weight = torch.empty(0, 20, dtype=torch.uint8)
    infini.ops.ggml_interleave(weight, 3, weight.clone())


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            lambda: (blocks(13, 8, 256), 13, torch.empty(8, 176, dtype=torch.uint8)),
            r"Q5_K \(13\) has no interleaved layout; it has: Q4_0=2",
        ),
        (
            lambda: (blocks(3, 12, 64), 3, torch.empty(12, 40, dtype=torch.uint8)),
            "`weight` must have a multiple of 8 rows",
        ),
        (
            lambda: (
                blocks(3, 8, 64)[:, :30],
                3,
                torch.empty(8, 30, dtype=torch.uint8),
            ),
            "`weight` must hold whole Q4_1 blocks of 20 bytes",
        ),
        (
            lambda: (blocks(3, 16, 64)[::2], 3, torch.empty(8, 40, dtype=torch.uint8)),
            r"`weight` must be contiguous \(strides \(40, 1\)\)",
        ),
        (
            lambda: (blocks(3, 8, 64), 3, torch.empty(8, 20, dtype=torch.uint8)),
            "`out` must have shape",
        ),
        (
            lambda: (blocks(3, 8, 64), 3, torch.empty(8, 40)),
            "`out` has dtype float32",
        ),
    ],
)
def test_ggml_interleave_errors(arguments, message):
    with pytest.raises(ValueError, match=message):
        infini.ops.ggml_interleave(*arguments())
