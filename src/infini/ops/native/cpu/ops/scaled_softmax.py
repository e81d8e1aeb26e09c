"""CPU `scaled_softmax` (slot 0): the shared row softmax
(`native/cpu/softmax.py`)."""

from __future__ import annotations

from infini.ops.base.scaled_softmax import ScaledSoftmax
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.softmax import SoftmaxLaunch


@implementation(operator="scaled_softmax", devices=("cpu",), slot=0)
class CpuScaledSoftmax(SoftmaxLaunch, ScaledSoftmax):
    precompile_scalars = (0.125,)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.input, args.out, args.input.ndim - 1, self.scale)
