"""CPU `softmax_infinilm` (slot 0): the shared row softmax
(`native/cpu/softmax.py`)."""

from __future__ import annotations

from infini.ops.base.softmax_infinilm import SoftmaxInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.softmax import SoftmaxLaunch


@implementation(operator="softmax_infinilm", devices=("cpu",), slot=0)
class CpuSoftmaxInfinilm(SoftmaxLaunch, SoftmaxInfinilm):
    precompile_scalars = (-1, None)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.input, args.out, self.dim)
