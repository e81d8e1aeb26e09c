"""CPU `add` (slot 0)."""

from __future__ import annotations

from infini.ops.base.add import Add
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
def _add(a, b, alpha):
    return a + alpha * b


@implementation(operator="add", devices=("cpu",), slot=0)
class CpuAdd(Add):
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
        serial, parallel = binary_kernels(_add, out.dtype, out.dtype, out.dtype, out.dtype)
        self.kernel = parallel if self.chunks > 1 else serial
        self.alias = AliasGuard(out, strides[0], [(args.input, strides[1]), (args.other, strides[2])])
        self.scalar = int(self.alpha) if out.dtype not in ("float16", "bfloat16", "float32", "float64") else self.alpha
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
            out_address, input_address, other_address, spans[0], spans[1], spans[2],
            plan.inner, plan.row_offsets, steps[0], steps[1], steps[2],
            self.chunk_size, self.chunks, self.total, self.scalar,
        )
        if target is not out:
            out.copy_(target)
