"""CPU `rms_norm` (slot 0): the row driver (`rows.py`) over `rms_norm_row`."""

from __future__ import annotations

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.jit import helper
from infini.ops.native.cpu.norms import normalize, sum_squares
from infini.ops.native.cpu.rows import (
    RowLaunch,
    RowOperand,
    precompile_calls,
    trailing_strides,
)


@helper
def rms_norm_row(operands, cols, row, params, scratch, narrow):
    """Operands (out, input, weight); params (eps,)."""
    compute = scratch.dtype.type
    total = sum_squares(operands[1], cols, compute)
    normalize(operands[0], operands[1], operands[2], cols, total, params[0], compute)


@implementation(operator="rms_norm", devices=("cpu",), slot=0)
class CpuRmsNorm(RmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        operands = [
            RowOperand(out, out.strides, written=True),
            RowOperand(input, input.strides),
            RowOperand(weight, trailing_strides(weight, input.ndim)),
        ]
        self.launch_rows = RowLaunch(rms_norm_row, input.shape, operands, (self.eps,))

    def launch(self, stream, input, weight, out) -> None:
        self.launch_rows(out, input, weight)

    def bind_launch(self, stream, input, weight, out):
        return self.launch_rows.bind(out, input, weight)

    @classmethod
    def precompile(cls) -> int:
        import torch

        import infini.ops

        def call(dtype, shape):
            input = torch.zeros(shape, dtype=dtype)
            weight = torch.ones(shape[-1], dtype=dtype)
            out = torch.empty_like(input)
            infini.ops.rms_norm(input, weight, 1e-6, out, implementation_index=0)

        return precompile_calls(call)
