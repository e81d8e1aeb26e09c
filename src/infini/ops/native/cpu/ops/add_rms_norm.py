"""CPU `add_rms_norm` (slot 0): the shared row kernels (`add_rms_norm_row`,
and `add_rms_norm_scratch_row` for a 16-bit `residual_out` in place of an
input)."""

from __future__ import annotations

from infini.ops.base.add_rms_norm import AddRmsNorm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.memory import ranges_overlap, span
from infini.ops.native.cpu.rows import (
    RowLaunch,
    RowOperand,
    add_rms_norm_row,
    add_rms_norm_scratch_row,
    compute_dtype,
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
        # `residual_out`: the kernel reads it back from `residual_out` when
        # that holds it exactly, else adds the inputs again, unless
        # `residual_out` is one of them (then the sums go through a scratch
        # row, which is slower).
        dtypes = (out.dtype, residual_out.dtype, input.dtype, weight.dtype)
        self.read_back = residual_out.dtype == compute_dtype(*dtypes)
        self.launch_rows = RowLaunch(
            add_rms_norm_row, input.shape, operands, (self.eps, self.read_back)
        )
        self.launch_scratch = RowLaunch(
            add_rms_norm_scratch_row, input.shape, operands, (self.eps,)
        )
        self.extents = tuple(
            span(meta.shape, meta.strides) * meta.element_size
            for meta in (residual_out, input, residual)
        )

    def launch(self, stream, input, residual, weight, out, residual_out) -> None:
        launch = self.launch_rows
        if not self.read_back and self._residual_out_overlaps(
            residual_out, input, residual
        ):
            launch = self.launch_scratch
        launch(out, residual_out, input, residual, weight)

    def _residual_out_overlaps(self, residual_out, input, residual) -> bool:
        out_bytes, input_bytes, residual_bytes = self.extents
        address = residual_out.data_ptr()
        return ranges_overlap(
            address, out_bytes, 1, input.data_ptr(), input_bytes, 1
        ) or ranges_overlap(
            address, out_bytes, 1, residual.data_ptr(), residual_bytes, 1
        )

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
