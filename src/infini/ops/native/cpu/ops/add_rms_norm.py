"""CPU `add_rms_norm` (slot 0): the shared row kernel (`add_rms_norm_row`)."""

from __future__ import annotations

from infini.ops.base.add_rms_norm import AddRmsNorm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.rows import (
    RowLaunch,
    RowOperand,
    add_rms_norm_row,
    precompile_calls,
    trailing_strides,
)


@implementation(operator="add_rms_norm", devices=("cpu",), slot=0)
class CpuAddRmsNorm(AddRmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, residual, weight = args.input, args.residual, args.weight
        out, residual_out = args.out, args.residual_out
        operands = [
            RowOperand(out, out.strides, written=True),
            RowOperand(residual_out, residual_out.strides, written=True),
            RowOperand(input, input.strides),
            RowOperand(residual, residual.strides),
            RowOperand(weight, trailing_strides(weight, input.ndim)),
        ]
        # The sum is normalised as computed (float32), not as rounded into
        # `residual_out`.
        self.launch_rows = RowLaunch(
            add_rms_norm_row, input.shape, operands, (self.eps,)
        )

    def launch(self, stream, input, residual, weight, out, residual_out) -> None:
        self.launch_rows(out, residual_out, input, residual, weight)

    @classmethod
    def precompile(cls) -> int:
        import torch

        import infini.ops

        def call(dtype, shape):
            input = torch.zeros(shape, dtype=dtype)
            weight = torch.ones(shape[-1], dtype=dtype)
            out, residual_out = torch.empty_like(input), torch.empty_like(input)
            infini.ops.add_rms_norm(
                input, input, weight, 1e-6, out, residual_out, implementation_index=0
            )

        return precompile_calls(call)
