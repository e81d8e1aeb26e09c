"""Row planning for kernels that run one program per row of the last
dimension (normalisations, softmaxes).

The leading dimensions of the operands are coalesced; when they collapse to
one dimension, row ``r`` of operand ``k`` starts at ``r * row_strides[k]``
(``NDIM == 0``). Otherwise the kernel reads a geometry table (as elementwise
kernels do, `elementwise.geometry_table`) with `row_offsets2`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.core.geometry import coalesce
from infini.ops.native.cuda.elementwise import geometry_table
from infini.ops.runtime.triton import INTERPRETER, Pointer, next_power_of_two

# Rows up to this many elements are held in registers in one block; longer
# rows are walked in `LOOP_BLOCK` chunks.
SINGLE_BLOCK_LIMIT = 8192
LOOP_BLOCK = 4096


class RowPlan:
    """`rows`, `ndim`, the geometry argument and per-operand row strides."""

    def __init__(self, leading_shape, operand_strides, device) -> None:
        rows = 1
        for size in leading_shape:
            rows *= size
        self.rows = rows
        shape, strides = coalesce(
            tuple(leading_shape), [tuple(s) for s in operand_strides]
        )
        if rows == 0:
            shape, strides = (0,), [(0,) for _ in operand_strides]
        if len(shape) <= 1:
            self.ndim = 0
            self.geometry = None
            self.row_strides = tuple(int(s[0]) if s else 0 for s in strides)
        else:
            self.ndim = len(shape)
            self.geometry = geometry_table(shape, strides, device)
            self.row_strides = tuple(0 for _ in strides)
        self.geometry_pointer = Pointer("int64")

    def geometry_or(self, tensor):
        """The geometry tensor, or any tensor when the kernel reads none."""
        return tensor if self.geometry is None else self.geometry


# Elements a program covers when rows are short: several rows share a
# program. The interpreter runs a program as NumPy steps, so it takes many.
GPU_TILE = 2048
INTERPRETER_TILE = 32768


def row_blocks(width: int, rows: int) -> tuple[int, int, bool, int]:
    """`(ROWS, BLOCK, SINGLE, num_warps)` for `rows` rows of `width`
    elements: rows per program, the column block, whether a row fits in one
    block, and the warps."""
    if width > SINGLE_BLOCK_LIMIT:
        return 1, LOOP_BLOCK, False, 8
    block = max(next_power_of_two(width), 16)
    tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
    per_program = max(1, min(tile // block, next_power_of_two(max(rows, 1))))
    warps = 4 if block <= 1024 else 8 if block <= 4096 else 16
    return per_program, block, True, warps


@triton.jit
def row_offsets2(row, geometry, stride0, stride1, NDIM: tl.constexpr):
    """The first elements of row `row` in two operands."""
    if NDIM == 0:
        first = row * stride0
        second = row * stride1
    else:
        first = row * 0
        second = row * 0
        remaining = row
        for step in tl.static_range(NDIM):
            dim = NDIM - 1 - step
            size = tl.load(geometry + dim)
            coordinate = remaining % size
            remaining = remaining // size
            first += coordinate * tl.load(geometry + NDIM + dim)
            second += coordinate * tl.load(geometry + 2 * NDIM + dim)
    return first, second


@triton.jit
def row_offsets4(row, geometry, stride0, stride1, stride2, stride3, NDIM: tl.constexpr):
    """The first elements of row `row` in four operands."""
    if NDIM == 0:
        first = row * stride0
        second = row * stride1
        third = row * stride2
        fourth = row * stride3
    else:
        first = row * 0
        second = row * 0
        third = row * 0
        fourth = row * 0
        remaining = row
        for step in tl.static_range(NDIM):
            dim = NDIM - 1 - step
            size = tl.load(geometry + dim)
            coordinate = remaining % size
            remaining = remaining // size
            first += coordinate * tl.load(geometry + NDIM + dim)
            second += coordinate * tl.load(geometry + 2 * NDIM + dim)
            third += coordinate * tl.load(geometry + 3 * NDIM + dim)
            fourth += coordinate * tl.load(geometry + 4 * NDIM + dim)
    return first, second, third, fourth
