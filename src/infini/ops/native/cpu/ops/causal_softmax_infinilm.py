"""CPU `causal_softmax_infinilm` (slot 0): the `causal_softmax` kernel."""

from __future__ import annotations

from infini.ops.base.causal_softmax_infinilm import CausalSoftmaxInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.softmax import CausalSoftmaxLaunch


@implementation(operator="causal_softmax_infinilm", devices=("cpu",), slot=0)
class CpuCausalSoftmaxInfinilm(CausalSoftmaxLaunch, CausalSoftmaxInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.input, args.out)
