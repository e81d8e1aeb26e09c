"""CPU `swiglu` (slot 0): the shared elementwise kernel with a SiLU combine."""

from __future__ import annotations

from infini.ops.base.swiglu import Swiglu
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.activations import swiglu_combine
from infini.ops.native.cpu.elementwise import (
    AliasGuard,
    RowPlan,
    binary_kernels,
    broadcast_strides,
    chunking,
    staging_like,
)


@implementation(operator="swiglu", devices=("cpu",), slot=0)
class CpuSwiglu(Swiglu):
    def __init__(self, args) -> None:
        super().__init__(args)
        out, shape = args.out, args.out.shape
        strides = [
            out.strides,
            broadcast_strides(args.input.shape, args.input.strides, shape),
            broadcast_strides(args.gate.shape, args.gate.strides, shape),
        ]
        self.plan = plan = RowPlan(shape, strides)
        self.chunk_size, self.chunks = chunking(plan)
        dtype = out.dtype
        serial, parallel = binary_kernels(swiglu_combine, dtype, dtype, dtype, dtype)
        self.kernel = parallel if self.chunks > 1 else serial
        self.alias = AliasGuard(
            out, strides[0], [(args.input, strides[1]), (args.gate, strides[2])]
        )
        self.total = plan.rows * plan.inner

    def launch(self, stream, input, gate, out) -> None:
        plan = self.plan
        if plan.numel == 0:
            return
        out_address = out.data_ptr()
        input_address = input.data_ptr()
        gate_address = gate.data_ptr()
        target = out
        if self.alias.needs_staging(out_address, (input_address, gate_address)):
            target = staging_like(out)
            out_address = target.data_ptr()
        spans, steps = plan.spans, plan.inner_strides
        self.kernel(
            out_address,
            input_address,
            gate_address,
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
            0.0,
        )
        if target is not out:
            out.copy_(target)
