"""CPU `causal_softmax` (slot 0): one Numba kernel over rows."""

from __future__ import annotations

from infini.ops.base.causal_softmax import CausalSoftmax
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.causal_softmax import CausalSoftmaxLaunch


@implementation(operator="causal_softmax", devices=("cpu",), slot=0)
class CpuCausalSoftmax(CausalSoftmaxLaunch, CausalSoftmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.input, args.out)
