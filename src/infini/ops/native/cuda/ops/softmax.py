"""CUDA-like `softmax` (slot 0) in Triton: a tile of slices per program.

The slices along `dim` are the rows (`RowPlan` over the other dimensions,
any strides). ``out = exp(x - max) * (1 / sum)`` in float32 (float64 for a
float64 `out`); an input of another dtype is converted first (rounded to a
16-bit `out` dtype, as ``input.to(dtype)`` would). A slice holding a NaN or
`+inf`, or only `-inf`, comes out NaN, as in torch. Slices longer than one
block run an online maximum and sum, then a second pass writes.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.softmax import Softmax
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as, round_as, store_as
from infini.ops.native.cuda.rows import RowPlan, row_blocks, row_offsets2
from infini.ops.native.cuda.special import exp
from infini.ops.runtime.triton import Kernel, OverlapGuard, require_device, staging_like


@triton.jit
def load_slice(pointer, mask, out, COMPUTE: tl.constexpr, NARROW: tl.constexpr):
    x = load_as(pointer, mask, COMPUTE)
    if NARROW:
        x = round_as(x, out)
    return x


@triton.jit
def softmax_kernel(
    out,
    input,
    geometry,
    rows,
    length,
    out_row_stride,
    input_row_stride,
    out_step,
    input_step,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    COMPUTE: tl.constexpr,
    NARROW: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    out_base, input_base = row_offsets2(
        row, geometry, out_row_stride, input_row_stride, NDIM
    )
    out_base = out_base[:, None]
    input_base = input_base[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    if SINGLE:
        mask = row_mask[:, None] & (columns < length)
        x = load_slice(
            input + input_base + columns * input_step, mask, out, COMPUTE, NARROW
        )
        x = tl.where(mask, x, -float("inf"))
        maximum = tl.max(x, axis=1)[:, None]
        exponent = tl.where(columns < length, exp(x - maximum), 0.0)
        inverse = 1.0 / tl.sum(exponent, axis=1)[:, None]
        store_as(out + out_base + columns * out_step, exponent * inverse, mask)
    else:
        maximum = tl.full([ROWS, 1], -float("inf"), COMPUTE)
        total = tl.zeros([ROWS, 1], dtype=COMPUTE)
        for start in range(0, length, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < length)
            x = load_slice(
                input + input_base + index * input_step, mask, out, COMPUTE, NARROW
            )
            x = tl.where(mask, x, -float("inf"))
            chunk_maximum = tl.maximum(maximum, tl.max(x, axis=1)[:, None])
            rescale = tl.where(
                chunk_maximum == maximum, 1.0, exp(maximum - chunk_maximum)
            )
            exponent = tl.where(index < length, exp(x - chunk_maximum), 0.0)
            total = total * rescale + tl.sum(exponent, axis=1)[:, None]
            maximum = chunk_maximum
        inverse = 1.0 / total
        for start in range(0, length, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < length)
            x = load_slice(
                input + input_base + index * input_step, mask, out, COMPUTE, NARROW
            )
            store_as(
                out + out_base + index * out_step, exp(x - maximum) * inverse, mask
            )


KERNEL = Kernel(softmax_kernel)


@implementation(
    operator="softmax",
    devices="cuda_like",
    slot=0,
)
class CudaSoftmax(Softmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, out = args.input, args.out
        if input.ndim == 0:
            leading, out_rows, input_rows = (), (), ()
            length, out_step, input_step = 1, 1, 1
        else:
            dim = self.dim
            others = [d for d in range(input.ndim) if d != dim]
            leading = tuple(input.shape[d] for d in others)
            out_rows = tuple(out.strides[d] for d in others)
            input_rows = tuple(input.strides[d] for d in others)
            length = input.shape[dim]
            out_step, input_step = out.strides[dim], input.strides[dim]
        self.plan = plan = RowPlan(leading, [out_rows, input_rows], self.device)
        self.empty = plan.rows == 0 or length == 0
        per_program, block, single, warps = row_blocks(length, plan.rows)
        narrow = out.dtype in ("float16", "bfloat16") and input.dtype != out.dtype
        self._launch = KERNEL.bind(
            grid=(-(-plan.rows // per_program),),
            arguments=(
                out,
                input,
                plan.geometry_pointer,
                plan.rows,
                length,
                *plan.row_strides,
                out_step,
                input_step,
            ),
            constexprs={
                "NDIM": plan.ndim,
                "ROWS": per_program,
                "BLOCK": block,
                "SINGLE": single,
                "COMPUTE": tl.float64 if out.dtype == "float64" else tl.float32,
                "NARROW": narrow,
            },
            device=self.device,
            num_warps=warps,
        )
        self.overlap = OverlapGuard(out, (input,))

    def launch(self, stream, input, out) -> None:
        if self.empty:
            return
        geometry = self.plan.geometry_or(out)
        if self.overlap(out, (input,)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, input, geometry)
                out.copy_(staging)
            return
        self._launch(stream, out, input, geometry)
