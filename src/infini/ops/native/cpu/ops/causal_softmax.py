"""CPU `causal_softmax` (slot 0): the shared row softmax
(`native/cpu/softmax.py`) under the causal mask."""

from __future__ import annotations

from infini.ops.base.causal_softmax import CausalSoftmax
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.softmax import CausalSoftmaxLaunch


@implementation(operator="causal_softmax", devices=("cpu",), slot=0)
class CpuCausalSoftmax(CausalSoftmaxLaunch, CausalSoftmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.input, args.out)
