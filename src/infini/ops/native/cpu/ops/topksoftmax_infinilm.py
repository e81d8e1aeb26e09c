"""CPU `topksoftmax_infinilm` (slot 0): the top-k gating kernel over tokens."""

from __future__ import annotations

from infini.ops.base.topksoftmax_infinilm import TopksoftmaxInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.routing import TopkGatingLaunch


@implementation(operator="topksoftmax_infinilm", devices=("cpu",), slot=0)
class CpuTopksoftmaxInfinilm(TopkGatingLaunch, TopksoftmaxInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan("softmax", args.input, None, None, args.values, args.indices, None)

    def launch(self, stream, input, values, indices) -> None:
        self.run(input, None, None, values, indices, None, self.norm, 1.0)
