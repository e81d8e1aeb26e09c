"""CPU `rms_norm` (slot 0): one Numba kernel over rows."""

from __future__ import annotations

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.elementwise import AliasGuard, staging_like
from infini.ops.native.cpu.memory import span
from infini.ops.native.cpu.rows import RowLayout, rms_norm_kernels


@implementation(operator="rms_norm", devices=("cpu",), slot=0)
class CpuRmsNorm(RmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        self.layout = layout = RowLayout(input.shape, [out.strides, input.strides])
        serial, parallel = rms_norm_kernels(input.dtype, weight.dtype, out.dtype)
        self.kernel = parallel if layout.chunks > 1 else serial
        self.weight_span = span(weight.shape, weight.strides)
        self.weight_step = weight.strides[0]
        # `weight` never lies element for element under `out` (its strides
        # differ), so any overlap with it is staged.
        self.alias = AliasGuard(
            out, out.strides, [(input, input.strides), (weight, ())]
        )

    def launch(self, stream, input, weight, out) -> None:
        layout = self.layout
        if layout.numel == 0:
            return
        out_address = out.data_ptr()
        input_address = input.data_ptr()
        weight_address = weight.data_ptr()
        target = out
        if self.alias.needs_staging(out_address, (input_address, weight_address)):
            target = staging_like(out)
            out_address = target.data_ptr()
        out_step, input_step = layout.col_steps
        self.kernel(
            out_address,
            input_address,
            weight_address,
            layout.spans[0],
            layout.spans[1],
            self.weight_span,
            layout.rows,
            layout.cols,
            layout.shape,
            layout.strides,
            out_step,
            input_step,
            self.weight_step,
            self.eps,
            layout.chunks,
        )
        if target is not out:
            out.copy_(target)
