"""CPU `scaled_softmax_infinilm` (slot 0): the shared row softmax
(`native/cpu/softmax.py`)."""

from __future__ import annotations

from infini.ops.base.scaled_softmax_infinilm import ScaledSoftmaxInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.softmax import SoftmaxLaunch


@implementation(operator="scaled_softmax_infinilm", devices=("cpu",), slot=0)
class CpuScaledSoftmaxInfinilm(SoftmaxLaunch, ScaledSoftmaxInfinilm):
    precompile_scalars = (0.125,)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.input, args.out, args.input.ndim - 1, self.scale)
