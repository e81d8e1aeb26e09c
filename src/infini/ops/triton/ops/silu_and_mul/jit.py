"""Triton JIT `silu_and_mul` (slot 10, NVIDIA):
``out = silu(input[..., :h]) * input[..., h:]``.

Any strides, as long as the leading dimensions coalesce into at most two.
A program covers ``BLOCK_SIZE`` columns of one row (default 1024). Tuning
values: `num_tokens` (rows), `hidden_size` (``h``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.runtime.triton import OverlapGuard, staging_like
from infini.ops.triton.jit.operator import TritonJitOperator, leading_rows


@triton.jit
def kernel(
    input_ptr,
    output_ptr,
    inner_rows,
    input_outer_stride,
    input_inner_stride,
    input_column_stride,
    output_outer_stride,
    output_inner_stride,
    output_column_stride,
    hidden_size,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    outer = row // inner_rows
    inner = row - outer * inner_rows
    columns = tl.program_id(1).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = columns < hidden_size
    first = (
        input_ptr
        + outer * input_outer_stride
        + inner * input_inner_stride
        + columns * input_column_stride
    )
    x = tl.load(first, mask=mask, other=0.0)
    y = tl.load(first + hidden_size * input_column_stride, mask=mask, other=0.0)
    # Self-contained (no helper calls): float32 arithmetic (float64 for
    # float64), bfloat16 widened and rounded by its bits.
    if x.dtype == tl.bfloat16:
        x = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
            tl.float32, bitcast=True
        )
        y = (y.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
            tl.float32, bitcast=True
        )
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
        y = y.to(tl.float32)
    result = x / (1.0 + tl.exp(-x)) * y
    destination = (
        output_ptr
        + outer * output_outer_stride
        + inner * output_inner_stride
        + columns * output_column_stride
    )
    if output_ptr.dtype.element_ty == tl.bfloat16:
        bits = result.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        upper = tl.where(result != result, 0x7FC0, rounded)
        tl.store(
            destination, upper.to(tl.uint16).to(tl.bfloat16, bitcast=True), mask=mask
        )
    else:
        tl.store(destination, result.to(output_ptr.dtype.element_ty), mask=mask)


@implementation(operator="silu_and_mul", devices=("nvidia",), slot=10)
class TritonJitSiluAndMul(SiluAndMul, TritonJitOperator):
    kernel = kernel
    default_constexprs = {"BLOCK_SIZE": 1024}
    written = (1,)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        hidden = self.half
        rows, inner_rows, input_strides, out_strides = leading_rows(
            self, out.shape[:-1], input.strides[:-1], out.strides[:-1]
        )
        self.empty = rows == 0 or hidden == 0
        self.overlap = OverlapGuard(out, (input,))
        self.setup_jit(
            getattr(args, "config", None),
            arguments=(
                input,
                out,
                inner_rows,
                *input_strides,
                input.strides[-1],
                *out_strides,
                out.strides[-1],
                hidden,
            ),
            tuning_values={"num_tokens": rows, "hidden_size": hidden},
            grid=lambda constexprs: (rows, -(-hidden // constexprs["BLOCK_SIZE"])),
        )

    def launch(self, stream, input, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (input,)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self.launch_jit(stream, input, staging)
                out.copy_(staging)
            return
        self.launch_jit(stream, input, out)
