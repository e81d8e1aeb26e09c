"""Triton JIT `rms_norm` (slot 10, NVIDIA): a tile of rows per program.

Any strides, as long as the leading dimensions of `input` and `out` coalesce
into at most two. Constexprs: ``BLOCK_SIZE`` (columns per step; default the
row length rounded up to a power of two, at most 4096) and
``ROWS_PER_PROGRAM`` (default: enough rows for about 2048 elements). Tuning
values: `num_rows`, `hidden_size`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.runtime.triton import (
    INTERPRETER,
    OverlapGuard,
    next_power_of_two,
    staging_like,
)
from infini.ops.triton.jit.operator import TritonJitOperator, leading_rows


@triton.jit
def kernel(
    input_ptr,
    weight_ptr,
    output_ptr,
    rows,
    inner_rows,
    input_outer_stride,
    input_inner_stride,
    input_column_stride,
    output_outer_stride,
    output_inner_stride,
    output_column_stride,
    weight_stride,
    hidden_size,
    eps,
    BLOCK_SIZE: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
):
    # A tile of ROWS_PER_PROGRAM rows by BLOCK_SIZE columns per step.
    row = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM + tl.arange(
        0, ROWS_PER_PROGRAM
    )
    row_mask = (row < rows)[:, None]
    outer = row // inner_rows
    inner = row - outer * inner_rows
    input_row = (input_ptr + outer * input_outer_stride + inner * input_inner_stride)[
        :, None
    ]
    output_row = (
        output_ptr + outer * output_outer_stride + inner * output_inner_stride
    )[:, None]
    columns = tl.arange(0, BLOCK_SIZE)[None, :]
    # Self-contained (no helper calls): float32 arithmetic (float64 for
    # float64), bfloat16 widened and rounded by its bits.
    if input_ptr.dtype.element_ty == tl.float64:
        total = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=tl.float64)
    else:
        total = tl.zeros([ROWS_PER_PROGRAM, BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, hidden_size, BLOCK_SIZE):
        index = start + columns
        mask = row_mask & (index < hidden_size)
        x = tl.load(input_row + index * input_column_stride, mask=mask, other=0.0)
        if x.dtype == tl.bfloat16:
            x = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
                tl.float32, bitcast=True
            )
        x = x.to(total.dtype)
        total += x * x
    scale = 1.0 / tl.sqrt(tl.sum(total, axis=1) / hidden_size + eps)
    scale = scale[:, None]
    for start in range(0, hidden_size, BLOCK_SIZE):
        index = start + columns
        mask = row_mask & (index < hidden_size)
        x = tl.load(input_row + index * input_column_stride, mask=mask, other=0.0)
        if x.dtype == tl.bfloat16:
            x = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
                tl.float32, bitcast=True
            )
        w = tl.load(
            weight_ptr + index * weight_stride, mask=index < hidden_size, other=0.0
        )
        if w.dtype == tl.bfloat16:
            w = (w.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
                tl.float32, bitcast=True
            )
        y = x.to(total.dtype) * scale * w.to(total.dtype)
        destination = output_row + index * output_column_stride
        if output_ptr.dtype.element_ty == tl.bfloat16:
            bits = y.to(tl.float32).to(tl.uint32, bitcast=True)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            upper = tl.where(y != y, 0x7FC0, rounded)
            tl.store(
                destination,
                upper.to(tl.uint16).to(tl.bfloat16, bitcast=True),
                mask=mask,
            )
        else:
            tl.store(destination, y.to(output_ptr.dtype.element_ty), mask=mask)


@implementation(operator="rms_norm", devices=("nvidia",), slot=10)
class TritonJitRmsNorm(RmsNorm, TritonJitOperator):
    kernel = kernel
    written = (2,)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        hidden = input.shape[-1]
        rows, inner_rows, input_strides, out_strides = leading_rows(
            self, input.shape[:-1], input.strides[:-1], out.strides[:-1]
        )
        self.empty = rows == 0 or hidden == 0
        block = min(max(next_power_of_two(hidden), 16), 4096)
        # Short rows share a program (the interpreter runs a program as NumPy
        # steps, so it takes more of them).
        tile = 32768 if INTERPRETER else 2048
        per_program = max(1, min(tile // block, next_power_of_two(max(rows, 1))))
        self.default_constexprs = {"BLOCK_SIZE": block, "ROWS_PER_PROGRAM": per_program}
        self.overlap = OverlapGuard(out, (input, weight))
        self.setup_jit(
            getattr(args, "config", None),
            arguments=(
                input,
                weight,
                out,
                rows,
                inner_rows,
                *input_strides,
                input.strides[-1],
                *out_strides,
                out.strides[-1],
                weight.strides[0],
                hidden,
                float(self.eps),
            ),
            tuning_values={"num_rows": rows, "hidden_size": hidden},
            grid=lambda constexprs: (-(-rows // constexprs["ROWS_PER_PROGRAM"]),),
        )

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (input, weight)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self.launch_jit(stream, input, weight, staging)
                out.copy_(staging)
            return
        self.launch_jit(stream, input, weight, out)
