"""NineToothed `causal_softmax` (slot 9, NVIDIA): softmax over the last
dimension under a bottom-right aligned causal mask, one row per program
(`rows.py`).

Element ``(i, j)`` of each ``(q, k)`` matrix takes part when
``j <= i + (k - q)``; the others are written as 0. The kernel reads `i`
and `j` like any operand: two stride-0 views of one int64 ``arange`` (made
once per geometry), arranged as `input` is, give each element its row and
its column. Computed in float64 and rounded once, as the slot-9 `softmax`.
"""

from __future__ import annotations

import ninetoothed.language as ntl

from infini.ops.base.causal_softmax import CausalSoftmax
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.core.tensor import TensorMeta
from infini.ops.ninetoothed.generation import TensorSpec, kernel_source
from infini.ops.ninetoothed.language import upcast
from infini.ops.ninetoothed.launch import bind_kernel, tensor_operand
from infini.ops.ninetoothed.rows import row_block, row_blocks
from infini.ops.runtime.triton import (
    OverlapGuard,
    require_device,
    staging_like,
    torch_device,
)


def arrangement(input, row, column, shift, out, *, block):
    return (
        row_blocks(input, block),
        row_blocks(row, block),
        row_blocks(column, block),
        shift,
        row_blocks(out, block),
    )


def application(input, row, column, shift, out):
    maximum = ntl.full(input.dtype.shape, float("-inf"), dtype=ntl.float64)
    total = ntl.zeros(input.dtype.shape, dtype=ntl.float64)
    for index in range(input.shape[0]):
        loaded = upcast(input[index]).to(ntl.float64)
        keep = column[index] <= row[index] + shift
        x = ntl.where(keep, loaded, float("-inf"))
        new = ntl.maximum(maximum, x, propagate_nan=ntl.PropagateNan.ALL)
        moved = ntl.where(new == float("-inf"), 0.0, new)
        total = total * ntl.exp(maximum - moved) + ntl.exp(x - moved)
        maximum = new
    row_maximum = ntl.max(maximum)
    row_shift = ntl.where(row_maximum == float("-inf"), 0.0, row_maximum)
    row_total = ntl.sum(total * ntl.exp(maximum - row_shift))
    for index in range(input.shape[0]):
        loaded = upcast(input[index]).to(ntl.float64)
        keep = column[index] <= row[index] + shift
        value = ntl.exp(loaded - row_shift) / row_total
        # 0, or NaN for a row that is NaN or has nothing unmasked (as torch).
        masked = ntl.where(row_total > 0.0, 0.0, float("nan"))
        out[index] = ntl.where(keep, value, masked)


def specs(ndim: int) -> tuple[TensorSpec, ...]:
    return (
        TensorSpec("input", ndim, other=float("-inf")),
        TensorSpec("row", ndim, other=0),
        TensorSpec("column", ndim, other=0),
        TensorSpec("shift", 0),
        TensorSpec("out", ndim),
    )


@implementation(operator="causal_softmax", devices=("nvidia",), slot=9)
class NineToothedCausalSoftmax(CausalSoftmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, out = args.input, args.out
        self.empty = input.numel == 0
        if self.empty:
            return
        rows, columns = input.shape[-2:]
        block = row_block(columns)
        import torch

        self.positions = torch.arange(
            max(rows, columns), dtype=torch.int64, device=torch_device(self.device)
        )
        positions = TensorMeta((max(rows, columns),), (1,), "int64", self.device)
        leading = (0,) * (input.ndim - 2)
        source = kernel_source(
            "causal_softmax",
            arrangement,
            application,
            specs(input.ndim),
            {"block": block},
        )
        self._launch = bind_kernel(
            source,
            {
                "input": tensor_operand(input),
                "row": tensor_operand(positions, input.shape, leading + (1, 0)),
                "column": tensor_operand(positions, input.shape, leading + (0, 1)),
                "shift": columns - rows,
                "out": tensor_operand(out),
            },
            self.device,
            num_warps=4 if block <= 1024 else 8,
        )
        self.overlap = OverlapGuard(out, (input,))

    def launch(self, stream, input, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (input,)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                positions = self.positions
                self._launch(stream, input, positions, positions, staging)
                out.copy_(staging)
            return
        self._launch(stream, input, self.positions, self.positions, out)
