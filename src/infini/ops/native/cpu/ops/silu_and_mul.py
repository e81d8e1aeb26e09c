"""CPU `silu_and_mul` (slot 0): the shared elementwise kernel over the two
halves of `input`, seen as two tensors of `out`'s shape."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.native.cpu.activations import silu_and_mul_combine
from infini.ops.native.cpu.elementwise import (
    AliasGuard,
    RowPlan,
    binary_kernels,
    chunking,
    staging_like,
)


@implementation(operator="silu_and_mul", devices=("cpu",), slot=0)
class CpuSiluAndMul(SiluAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        shape = out.shape
        # Both halves have `out`'s shape and `input`'s strides; the second
        # starts `half` elements further along the last dimension.
        half = TensorMeta(shape, input.strides, input.dtype, input.device)
        self.second_offset = self.half * input.strides[-1] * input.element_size
        self.plan = plan = RowPlan(shape, [out.strides, input.strides, input.strides])
        self.chunk_size, self.chunks = chunking(plan)
        dtype = out.dtype
        serial, parallel = binary_kernels(
            silu_and_mul_combine, dtype, dtype, dtype, dtype
        )
        self.kernel = parallel if self.chunks > 1 else serial
        self.alias = AliasGuard(
            out, out.strides, [(half, input.strides), (half, input.strides)]
        )
        self.total = plan.rows * plan.inner

    def launch(self, stream, input, out) -> None:
        plan = self.plan
        if plan.numel == 0:
            return
        out_address = out.data_ptr()
        first_address = input.data_ptr()
        second_address = first_address + self.second_offset
        target = out
        if self.alias.needs_staging(out_address, (first_address, second_address)):
            target = staging_like(out)
            out_address = target.data_ptr()
        spans, steps = plan.spans, plan.inner_strides
        self.kernel(
            out_address,
            first_address,
            second_address,
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
