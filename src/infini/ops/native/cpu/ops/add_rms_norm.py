"""CPU `add_rms_norm` (slot 0): the row driver (`rows.py`) over
`add_rms_norm_row`, and `add_rms_norm_scratch_row` for a 16-bit
`residual_out` in place of an input."""

from __future__ import annotations

import numpy as np

from infini.ops.base.add_rms_norm import AddRmsNorm
from infini.ops.core.geometry import ranges_overlap, span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.dtype_io import identity
from infini.ops.native.cpu.jit import helper
from infini.ops.native.cpu.norms import add_squares, normalize, normalize_sum
from infini.ops.native.cpu.rows import (
    SUM_BLOCK,
    RowLaunch,
    RowOperand,
    compute_dtype,
    precompile_calls,
    trailing_strides,
    unsigned,
)


@helper
def add_rms_norm_row(operands, cols, row, params, scratch, narrow):
    """Operands (out, residual_out, input, residual, weight); params (eps,
    read_back).

    The sum is normalised as computed (unrounded): with `read_back` it is
    read back from `residual_out` (which holds it exactly: it has the
    compute type), else computed again from the inputs, which then must not
    be `residual_out` (`add_rms_norm_scratch_row` serves that case)."""
    compute = scratch.dtype.type
    a, b, weight, eps = operands[2], operands[3], operands[4], params[0]
    total = add_squares(a, b, operands[1], identity, cols, compute)
    if params[1]:
        normalize(operands[0], operands[1], weight, cols, total, eps, compute)
    else:
        normalize_sum(operands[0], a, b, weight, cols, total, eps, compute)


@helper
def add_rms_norm_scratch_row(operands, cols, row, params, scratch, narrow):
    """`add_rms_norm_row` keeping the unrounded sums in the scratch row, for
    a 16-bit `residual_out` that is also an input."""
    compute = scratch.dtype.type
    out_view, out_step, store_out = operands[0][0], operands[0][1], operands[0][3]
    sum_view, sum_step, store_sum = operands[1][0], operands[1][1], operands[1][3]
    a_view, a_step, load_a = operands[2][0], operands[2][1], operands[2][2]
    b_view, b_step, load_b = operands[3][0], operands[3][1], operands[3][2]
    weight_view, weight_step, load_weight = (
        operands[4][0],
        operands[4][1],
        operands[4][2],
    )
    total = 0.0
    for start in range(0, cols, SUM_BLOCK):
        partial = compute(0)
        for j in range(start, min(start + SUM_BLOCK, cols)):
            value = compute(load_a(a_view, unsigned(j * a_step))) + compute(
                load_b(b_view, unsigned(j * b_step))
            )
            store_sum(sum_view, unsigned(j * sum_step), value)
            scratch[unsigned(j)] = value
            partial += value * value
        total += partial
    scale = compute(1.0 / np.sqrt(total / cols + params[0]))
    for j in range(cols):
        value = scratch[j] * compute(load_weight(weight_view, j * weight_step))
        store_out(out_view, j * out_step, value * scale)


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
