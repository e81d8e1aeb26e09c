"""NineToothed `softmax` (slot 9, NVIDIA): ``exp(x - max) / sum`` along
`dim`, one row per program (`rows.py`; `dim` is moved last).

One pass keeps, lane by lane, the running maximum and the sum of
exponentials scaled to it; the lanes are combined at the end and a second
pass writes ``exp(x - max) / sum``. Computed in float64 for every dtype
(rounded once when stored), so the results match the float64 reference;
NaN, `+inf` and rows of `-inf` give NaN as torch does.
"""

from __future__ import annotations

import ninetoothed.language as ntl

from infini.ops.base.softmax import Softmax
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.ninetoothed.generation import TensorSpec, kernel_source
from infini.ops.ninetoothed.language import upcast
from infini.ops.ninetoothed.launch import bind_kernel, tensor_operand
from infini.ops.ninetoothed.rows import as_rows, row_block, row_blocks
from infini.ops.runtime.triton import OverlapGuard, require_device, staging_like


def arrangement(input, out, *, block):
    return row_blocks(input, block), row_blocks(out, block)


def application(input, out):
    maximum = ntl.full(input.dtype.shape, float("-inf"), dtype=ntl.float64)
    total = ntl.zeros(input.dtype.shape, dtype=ntl.float64)
    for index in range(input.shape[0]):
        x = upcast(input[index]).to(ntl.float64)
        new = ntl.maximum(maximum, x, propagate_nan=ntl.PropagateNan.ALL)
        shift = ntl.where(new == float("-inf"), 0.0, new)
        total = total * ntl.exp(maximum - shift) + ntl.exp(x - shift)
        maximum = new
    row_maximum = ntl.max(maximum)
    row_shift = ntl.where(row_maximum == float("-inf"), 0.0, row_maximum)
    row_total = ntl.sum(total * ntl.exp(maximum - row_shift))
    for index in range(input.shape[0]):
        x = upcast(input[index]).to(ntl.float64)
        out[index] = ntl.exp(x - row_shift) / row_total


def specs(ndim: int) -> tuple[TensorSpec, ...]:
    return (TensorSpec("input", ndim, other=float("-inf")), TensorSpec("out", ndim))


@implementation(operator="softmax", devices=("nvidia",), slot=9)
class NineToothedSoftmax(Softmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, out = args.input, args.out
        self.empty = input.numel == 0
        if self.empty:
            return
        dim = self.dim if input.ndim else None
        shape, input_strides = as_rows(input, dim)
        _, out_strides = as_rows(out, dim)
        block = row_block(shape[-1])
        source = kernel_source(
            "softmax", arrangement, application, specs(len(shape)), {"block": block}
        )
        self._launch = bind_kernel(
            source,
            {
                "input": tensor_operand(input, shape, input_strides),
                "out": tensor_operand(out, shape, out_strides),
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
                self._launch(stream, input, staging)
                out.copy_(staging)
            return
        self._launch(stream, input, out)
