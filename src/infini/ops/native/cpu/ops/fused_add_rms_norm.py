"""CPU `fused_add_rms_norm` (slot 0): the row driver (`rows.py`) over
`fused_add_rms_norm_row`, in place."""

from __future__ import annotations

from infini.ops.base.fused_add_rms_norm import FusedAddRmsNorm
from infini.ops.core.geometry import ranges_overlap, span
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.native.cpu.dtype_io import rounding
from infini.ops.native.cpu.jit import helper
from infini.ops.native.cpu.norms import add_squares, normalize
from infini.ops.native.cpu.rows import (
    RowLaunch,
    RowOperand,
    precompile_calls,
    trailing_strides,
)


@helper
def fused_add_rms_norm_row(operands, cols, row, params, scratch, narrow):
    """Operands (input, residual, weight), the first two updated in place:
    ``residual += input``, then ``input = rms_norm(residual) * weight``;
    params (eps,). The second pass reads `residual` back: it holds the sum
    as rounded (`narrow`), which is what is normalised."""
    compute = scratch.dtype.type
    total = add_squares(operands[0], operands[1], operands[1], narrow, cols, compute)
    normalize(operands[0], operands[1], operands[2], cols, total, params[0], compute)


@implementation(operator="fused_add_rms_norm", devices=("cpu",), slot=0)
class CpuFusedAddRmsNorm(FusedAddRmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, residual, weight = args.input, args.residual, args.weight
        if weight is None:
            # No weight: a single 1 read for every element.
            weight = TensorMeta((1,), (0,), input.dtype, input.device)
            self.ones = None
        self.has_weight = args.weight is not None
        # `input` and `residual` are read and written by the same row pass
        # (each element read before it is written), so they are not staged.
        operands = [
            RowOperand(input, input.strides),
            RowOperand(residual, residual.strides),
            RowOperand(weight, trailing_strides(weight, input.ndim)),
        ]
        self.launch_rows = RowLaunch(
            fused_add_rms_norm_row,
            input.shape,
            operands,
            (self.epsilon,),
            # The rounded `residual` is what is normalised.
            rounding(residual.dtype),
        )
        size = input.element_size
        self.extents = (
            span(input.shape, input.strides) * size,
            span(residual.shape, residual.strides) * size,
            span(weight.shape, weight.strides) * weight.element_size,
        )

    def launch(self, stream, input, residual, weight) -> None:
        if weight is None:
            if self.ones is None:
                import torch

                self.ones = torch.ones(1, dtype=input.dtype)
            weight = self.ones
        elif self._weight_overlaps(input, residual, weight):
            # Rows are written one after the other while every row reads
            # the whole weight: a weight in their memory is read first.
            weight = weight.clone()
        self.launch_rows(input, residual, weight)

    def bind_launch(self, stream, input, residual, weight):
        if weight is None or self._weight_overlaps(input, residual, weight):
            return None
        return self.launch_rows.bind(input, residual, weight)

    def _weight_overlaps(self, input, residual, weight) -> bool:
        input_bytes, residual_bytes, weight_bytes = self.extents
        address = weight.data_ptr()
        return ranges_overlap(
            address, weight_bytes, 1, input.data_ptr(), input_bytes, 1
        ) or ranges_overlap(
            address, weight_bytes, 1, residual.data_ptr(), residual_bytes, 1
        )

    @classmethod
    def precompile(cls) -> int:
        import torch

        import infini.ops

        def call(dtype, shape):
            input = torch.zeros(shape, dtype=dtype)
            weight = torch.ones(shape[-1], dtype=dtype)
            infini.ops.fused_add_rms_norm(
                input, torch.zeros_like(input), weight, 1e-6, implementation_index=0
            )

        return precompile_calls(call)
