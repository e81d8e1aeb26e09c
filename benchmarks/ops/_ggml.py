"""Shapes and inputs shared by the `ggml_*` benchmarks: the matrices of the
SmolLM2-135M Q4_1 GGUF model (the runner's 4-bit model), as random blocks
with small finite scales."""

from __future__ import annotations

import torch

import infini.ops
from infini.ops.base._ggml import (
    GGML_TYPES,
    Q4_0,
    Q4_1,
    Q4_K,
    Q5_0,
    Q5_1,
    Q5_K,
    Q6_K,
    Q8_0,
    row_bytes,
)

# (rows, cols, type): attention q/o, k/v, MLP gate/up, MLP down, and the
# Q8_0 embedding that is also the output head.
SHAPES = (
    (576, 576, Q4_1),
    (192, 576, Q4_1),
    (1536, 576, Q4_1),
    (576, 1536, Q4_1),
    (49152, 576, Q8_0),
)

# Byte offsets of each block's float16 factors.
_FACTORS = {
    Q4_0: (0,),
    Q4_1: (0, 2),
    Q5_0: (0,),
    Q5_1: (0, 2),
    Q8_0: (0,),
    Q4_K: (0, 2),
    Q5_K: (0, 2),
    Q6_K: (208,),
}


def packed_weight(rows: int, cols: int, quant_type: int) -> torch.Tensor:
    entry = GGML_TYPES[quant_type]
    blocks = torch.randint(
        0,
        256,
        (rows, cols // entry.block_elements, entry.block_bytes),
        dtype=torch.uint8,
    )
    for offset in _FACTORS[quant_type]:
        factors = (torch.rand(rows, cols // entry.block_elements, 1) * 0.02).half()
        blocks[..., offset : offset + 2] = factors.view(torch.uint8)
    return blocks.reshape(rows, row_bytes(quant_type, cols))


def dequantized(weight: torch.Tensor, quant_type: int, cols: int, dtype):
    """The float weight torch multiplies by (made once, outside the timing)."""
    values = torch.empty(weight.shape[0], cols, dtype=dtype)
    infini.ops.ggml_dequantize(weight, quant_type, weight.shape[0], cols, values)
    return values


def label(rows: int, cols: int, quant_type: int, tokens: int) -> str:
    return f"{GGML_TYPES[quant_type].name} ({rows}, {cols}) x {tokens} tokens"
