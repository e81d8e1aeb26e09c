"""NineToothed `gemm` (slot 9, NVIDIA): ``y = alpha * op(a) @ op(b)``, one
``(block_m, block_n)`` tile of `y` per program.

Every operand is seen as a batch of matrices, ``(batch, rows, columns)``:
transposition is a swap of strides (the base's ``a_shape``/``a_strides``),
a 2-D operand or a batch of one is a stride-0 batch, so one kernel serves
every layout. Arrangement: `y` is cut into ``(block_m, block_n)`` tiles;
the program of tile ``(z, i, j)`` gets row ``(z, i)`` of
``(block_m, block_k)`` tiles of ``op(a)`` and column ``(z, j)`` of
``(block_k, block_n)`` tiles of ``op(b)``. Application: the sum of the tile
products over `k` in the accumulator type (float32, float64 for float64),
times `alpha`, rounded once when stored. float32 products run in IEEE
float32 (no TF32), 16-bit floats are multiplied exactly into the float32
accumulator (upcast first under Triton's interpreter, whose 16-bit
arithmetic is unreliable). `c` and `beta` are refused by the base, as at
every slot.
"""

from __future__ import annotations

import ninetoothed.language as ntl
import triton.language as tl

from infini.ops.base.gemm import Gemm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.ninetoothed.generation import TensorSpec, kernel_source
from infini.ops.ninetoothed.language import dot_operand
from infini.ops.ninetoothed.launch import bind_kernel, tensor_operand
from infini.ops.runtime.triton import (
    INTERPRETER,
    OverlapGuard,
    next_power_of_two,
    require_device,
    staging_like,
)

# Tile sizes on a GPU (without auto-tuning): (block_m, block_n, block_k,
# warps) by dtype, shrunk to the matrix when it is smaller. The interpreter
# runs a tile as one NumPy step, so it takes the whole matrix up to
# `INTERPRETER_TILE`.
GPU_TILES = {
    "float16": (128, 128, 32, 8),
    "bfloat16": (128, 128, 32, 8),
    "float32": (64, 64, 32, 4),
    "float64": (32, 32, 16, 4),
}
MIN_TILE = 16
INTERPRETER_TILE = 128


def arrangement(a, b, alpha, y, accumulate, wide, *, block_m, block_n, block_k):
    out = y.tile((1, block_m, block_n))
    out.dtype = out.dtype.squeeze(0)
    # Row (z, i) of op(a)'s tiles and column (z, j) of op(b)'s, repeated
    # for every tile of `y` that needs them.
    lhs = a.tile((1, block_m, block_k)).tile((1, 1, -1))
    lhs = lhs.expand((-1, -1, out.shape[2]))
    lhs.dtype = lhs.dtype.squeeze((0, 1))
    lhs.dtype.dtype = lhs.dtype.dtype.squeeze(0)
    rhs = b.tile((1, block_k, block_n)).tile((1, -1, 1))
    rhs = rhs.expand((-1, out.shape[1], -1))
    rhs.dtype = rhs.dtype.squeeze((0, 2))
    rhs.dtype.dtype = rhs.dtype.dtype.squeeze(0)
    return lhs, rhs, alpha, out, accumulate, wide


def application(a, b, alpha, y, accumulate, wide):
    total = ntl.zeros(y.shape, dtype=accumulate)
    for index in range(a.shape[0]):
        total += ntl.dot(
            dot_operand(a[index], wide),
            dot_operand(b[index], wide),
            input_precision="ieee",
            out_dtype=accumulate,
        )
    y = total * alpha  # noqa: F841 - a store


def specs() -> tuple[TensorSpec, ...]:
    return (
        TensorSpec("a", 3, other=0),
        TensorSpec("b", 3, other=0),
        TensorSpec("alpha", 0),
        TensorSpec("y", 3),
        TensorSpec("accumulate", 0, constexpr=True),
        TensorSpec("wide", 0, constexpr=True),
    )


def tiles(dtype: str, m: int, n: int, k: int) -> tuple[int, int, int, int]:
    """``(block_m, block_n, block_k, warps)`` for an ``(m, k) @ (k, n)``
    product."""
    if INTERPRETER:
        block_m, block_n, block_k, warps = (INTERPRETER_TILE,) * 3 + (4,)
    else:
        block_m, block_n, block_k, warps = GPU_TILES[dtype]

    def fit(block, size):
        return min(block, max(next_power_of_two(size), MIN_TILE))

    return fit(block_m, m), fit(block_n, n), fit(block_k, k), warps


def source(block_m: int, block_n: int, block_k: int):
    return kernel_source(
        "gemm",
        arrangement,
        application,
        specs(),
        {"block_m": block_m, "block_n": block_n, "block_k": block_k},
    )


def constexprs(dtype: str) -> dict:
    """The accumulator type and whether 16-bit operands are upcast before
    the product (only under the interpreter)."""
    return {
        "accumulate": tl.float64 if dtype == "float64" else tl.float32,
        "wide": INTERPRETER,
    }


def batched(shape, strides, batch: int):
    """`(shape, strides)` as ``(batch, rows, columns)``: a 2-D operand and a
    batch of one are shared by every batch (stride 0)."""
    if len(shape) == 2:
        return (batch, *shape), (0, *strides)
    if shape[0] == 1:
        return (batch, *shape[1:]), (0, *strides[1:])
    return tuple(shape), tuple(strides)


@implementation(operator="gemm", devices=("nvidia",), slot=9)
class NineToothedGemm(Gemm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        a, b, y = args.a, args.b, args.y
        batch = y.shape[0] if y.ndim == 3 else 1
        self.empty = batch * self.m * self.n == 0
        if self.empty:
            return
        a_shape, a_strides = batched(self.a_shape, self.a_strides, batch)
        b_shape, b_strides = batched(self.b_shape, self.b_strides, batch)
        y_shape, y_strides = batched(y.shape, y.strides, batch)
        block_m, block_n, block_k, warps = tiles(y.dtype, self.m, self.n, self.k)
        self._launch = bind_kernel(
            source(block_m, block_n, block_k),
            {
                "a": tensor_operand(a, a_shape, a_strides),
                "b": tensor_operand(b, b_shape, b_strides),
                "alpha": float(self.alpha),
                "y": tensor_operand(y, y_shape, y_strides),
                **constexprs(y.dtype),
            },
            self.device,
            num_warps=warps,
        )
        self.overlap = OverlapGuard(y, (a, b))

    def launch(self, stream, a, b, c, y) -> None:
        if self.empty:
            return
        if self.overlap(y, (a, b)):
            with stream_context(self.device, stream):
                staging = staging_like(y)
                self._launch(stream, a, b, staging)
                y.copy_(staging)
            return
        self._launch(stream, a, b, y)
