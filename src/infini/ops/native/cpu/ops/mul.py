"""CPU `mul` (slot 0)."""

from __future__ import annotations

from infini.ops.base.mul import Mul
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.elementwise import (
    AliasGuard,
    RowPlan,
    binary_kernels,
    broadcast_strides,
    chunking,
    staging_like,
)
from infini.ops.native.cpu.jit import helper


@helper
def _mul(a, b, scalar):
    return a * b


@implementation(operator="mul", devices=("cpu",), slot=0)
class CpuMul(Mul):
    def __init__(self, args) -> None:
        super().__init__(args)
        out, shape = args.out, args.out.shape
        strides = [
            out.strides,
            broadcast_strides(args.input.shape, args.input.strides, shape),
            broadcast_strides(args.other.shape, args.other.strides, shape),
        ]
        self.plan = plan = RowPlan(shape, strides)
        self.chunk_size, self.chunks = chunking(plan)
        # Products of 16-bit floats are exact in float32, so rounding the
        # float32 product once gives the correctly rounded result, as torch.
        serial, parallel = binary_kernels(
            _mul, out.dtype, out.dtype, out.dtype, out.dtype
        )
        self.kernel = parallel if self.chunks > 1 else serial
        self.alias = AliasGuard(
            out, strides[0], [(args.input, strides[1]), (args.other, strides[2])]
        )
        self.total = plan.rows * plan.inner

    def launch(self, stream, input, other, out) -> None:
        plan = self.plan
        if plan.numel == 0:
            return
        out_address = out.data_ptr()
        input_address = input.data_ptr()
        other_address = other.data_ptr()
        target = out
        if self.alias.needs_staging(out_address, (input_address, other_address)):
            target = staging_like(out)
            out_address = target.data_ptr()
        spans = plan.spans
        steps = plan.inner_strides
        self.kernel(
            out_address,
            input_address,
            other_address,
            spans[0],
            spans[1],
            spans[2],
            plan.inner,
            plan.row_offsets,
            steps[0],
            steps[1],
            steps[2],
            self.chunk_size,
            self.chunks,
            self.total,
            0,
        )
        if target is not out:
            out.copy_(target)
