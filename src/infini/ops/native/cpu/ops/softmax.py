"""CPU `softmax` (slot 0): the shared row softmax (`native/cpu/softmax.py`)."""

from __future__ import annotations

from infini.ops.base.softmax import Softmax
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.softmax import SoftmaxLaunch


@implementation(operator="softmax", devices=("cpu",), slot=0)
class CpuSoftmax(SoftmaxLaunch, Softmax):
    precompile_scalars = (-1, None)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.input, args.out, self.dim)
