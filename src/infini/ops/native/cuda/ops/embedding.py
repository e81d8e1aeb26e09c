"""CUDA-like `embedding` (slot 0) in Triton: ``out[...] = weight[input[...]]``.

The indices are checked first (`check_indices`, a scan on the device: a bad
one raises `ValueError` and nothing is written). With `max_norm`, the
selected rows of `weight` are renormalised in place before the lookup, as
torch's `embedding_renorm_` does: the indices are sorted (on the device) and
only the first of equal ones renormalises its row, so no row is scaled
twice; the norm is accumulated in float64, rounded to `weight`'s dtype as
the scale is, and the product taken in float32. The lookup copies bit
patterns, a tile of index rows per program; an `out` overlapping `weight`
or `input` is computed into a staging buffer.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from infini.ops.base.embedding import Embedding
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import (
    bits_pointer,
    load_or_zero,
    round_as,
    store_as,
)
from infini.ops.native.cuda.rows import RowPlan, row_offsets2
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    Pointer,
    next_power_of_two,
    require_device,
    staging_like,
)

# Elements a program covers; the interpreter runs a program as NumPy steps.
GPU_TILE = 4096
INTERPRETER_TILE = 65536
COLUMN_LIMIT = 4096

# How the norm of a row is taken (`NORM` constexpr).
NORM_P, NORM_2, NORM_MAX, NORM_MIN, NORM_COUNT = range(5)


@triton.jit
def embedding_kernel(
    out,
    weight,
    input,
    geometry,
    rows,
    dim,
    input_row_stride,
    out_row_stride,
    out_step,
    weight_row_stride,
    weight_step,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    input_base, out_base = row_offsets2(
        row, geometry, input_row_stride, out_row_stride, NDIM
    )
    selected = tl.load(input + input_base, mask=row_mask, other=0).to(tl.int64)
    source = bits_pointer(weight) + (selected * weight_row_stride)[:, None]
    target = bits_pointer(out) + out_base[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    for start in range(0, dim, BLOCK):
        index = start + columns
        mask = row_mask[:, None] & (index < dim)
        value = tl.load(source + index * weight_step, mask=mask)
        tl.store(target + index * out_step, value, mask=mask)


@triton.jit
def renorm_kernel(
    weight,
    sorted,
    count,
    dim,
    weight_row_stride,
    weight_step,
    max_norm,
    norm_type,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    NORM: tl.constexpr,
):
    position = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    in_range = position < count
    selected = tl.load(sorted + position, mask=in_range, other=0)
    previous = tl.load(sorted + position - 1, mask=in_range & (position > 0), other=-1)
    # The first of equal indices renormalises the row.
    row_mask = in_range & (selected != previous)
    base = weight + (selected.to(tl.int64) * weight_row_stride)[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    if NORM == 3:
        total = tl.full([ROWS], float("inf"), tl.float64)
    else:
        total = tl.zeros([ROWS], dtype=tl.float64)
    for start in range(0, dim, BLOCK):
        index = start + columns
        mask = row_mask[:, None] & (index < dim)
        value = tl.abs(load_or_zero(base + index * weight_step, mask, tl.float64))
        if NORM == 1:
            total += tl.sum(value * value, axis=1)
        elif NORM == 2:
            total = tl.maximum(total, tl.max(value, axis=1))
        elif NORM == 3:
            value = tl.where(mask, value, float("inf"))
            total = tl.minimum(total, tl.min(value, axis=1))
        elif NORM == 4:
            total += tl.sum(tl.where(value != 0.0, 1.0, 0.0), axis=1)
        else:
            power = tl.exp2(norm_type * tl.log2(value))
            total += tl.sum(tl.where(mask, power, 0.0), axis=1)
    if NORM == 1:
        norm = tl.sqrt(total)
    elif NORM == 0:
        norm = tl.exp2(tl.log2(total) / norm_type)
    else:
        norm = total
    norm = round_as(norm, weight)
    scale = round_as(max_norm / (norm + 1e-7), weight).to(tl.float32)
    scaled = row_mask & (norm > max_norm)
    for start in range(0, dim, BLOCK):
        index = start + columns
        mask = scaled[:, None] & (index < dim)
        pointer = base + index * weight_step
        value = load_or_zero(pointer, mask, tl.float32)
        store_as(pointer, value * scale[:, None], mask)


KERNEL = Kernel(embedding_kernel)
RENORM_KERNEL = Kernel(renorm_kernel)


def _norm_kind(norm_type: float) -> int:
    if norm_type == 2.0:
        return NORM_2
    if norm_type == math.inf:
        return NORM_MAX
    if norm_type == -math.inf:
        return NORM_MIN
    if norm_type == 0.0:
        return NORM_COUNT
    return NORM_P


def _tile(columns: int, rows: int) -> tuple[int, int]:
    """`(ROWS, BLOCK)` for `rows` rows of `columns` elements."""
    block = min(max(next_power_of_two(columns), 16), COLUMN_LIMIT)
    tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
    return max(1, min(tile // block, next_power_of_two(max(rows, 1)))), block


@implementation(
    operator="embedding",
    devices="cuda_like",
    slot=0,
)
class CudaEmbedding(Embedding):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, weight, out = args.input, args.weight, args.out
        dim = weight.shape[1]
        self.plan = plan = RowPlan(
            input.shape, [input.strides, out.strides[:-1]], self.device
        )
        self.empty = plan.rows == 0
        rows, block = _tile(dim, plan.rows)
        self._launch = KERNEL.bind(
            grid=(-(-plan.rows // rows),),
            arguments=(
                out,
                weight,
                input,
                plan.geometry_pointer,
                plan.rows,
                dim,
                *plan.row_strides,
                out.strides[-1],
                *weight.strides,
            ),
            constexprs={"NDIM": plan.ndim, "ROWS": rows, "BLOCK": block},
            device=self.device,
        )
        self.overlap = OverlapGuard(out, (weight, input))
        self._renorm = None
        if self.max_norm is not None:
            count = input.numel
            rows, block = _tile(dim, count)
            self._renorm = RENORM_KERNEL.bind(
                grid=(-(-count // rows),),
                arguments=(
                    weight,
                    Pointer(input.dtype),
                    count,
                    dim,
                    *weight.strides,
                    float(self.max_norm),
                    float(self.norm_type),
                ),
                constexprs={
                    "ROWS": rows,
                    "BLOCK": block,
                    "NORM": _norm_kind(float(self.norm_type)),
                },
                device=self.device,
            )

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        with stream_context(self.device, stream):
            self.check_indices(input)
        geometry = self.plan.geometry_or(out)
        if self._renorm is not None:
            import torch

            with stream_context(self.device, stream):
                sorted = torch.sort(input.reshape(-1)).values
            self._renorm(stream, weight, sorted)
        if self.overlap(out, (weight, input)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, weight, input, geometry)
                out.copy_(staging)
            return
        self._launch(stream, out, weight, input, geometry)
