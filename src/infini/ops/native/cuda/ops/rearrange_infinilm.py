"""CUDA-like `rearrange_infinilm` (slot 0): ``out.copy_(input.expand_as(out))``
in Triton, with `copy`'s bit-copy kernel.

The elementwise plan walks `out`'s elements in the order of its strides
(`input` broadcast to `out`'s shape, stride 0 where it broadcasts), so writes
are coalesced whatever the layouts; contiguous operands take the flat path
with vector loads and stores. Elements move as integers of their width, bit
for bit (NaN payloads kept). An `out` overlapping `input` other than element
for element is written through a staging buffer.
"""

from __future__ import annotations

from infini.ops.base.rearrange_infinilm import RearrangeInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import ElementwiseLaunch
from infini.ops.native.cuda.ops.copy import KERNEL as COPY_KERNEL
from infini.ops.runtime.triton import require_device


@implementation(operator="rearrange_infinilm", devices="cuda_like", slot=0)
class CudaRearrangeInfinilm(RearrangeInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self._launch = ElementwiseLaunch(
            COPY_KERNEL, self.device, args.out, (args.input,)
        )

    def launch(self, stream, input, out) -> None:
        self._launch(stream, out, input)
