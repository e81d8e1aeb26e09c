"""CPU `topk_softmax` (slot 0): one Numba kernel over tokens."""

from __future__ import annotations

from infini.ops.base.topk_softmax import TopkSoftmax
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.routing import TopkGatingLaunch


@implementation(operator="topk_softmax", devices=("cpu",), slot=0)
class CpuTopkSoftmax(TopkGatingLaunch, TopkSoftmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(
            "softmax",
            args.gating_output,
            args.bias,
            args.is_padding,
            args.topk_weights,
            args.topk_indices,
            args.token_expert_indices,
        )

    def launch(
        self,
        stream,
        gating_output,
        bias,
        is_padding,
        topk_weights,
        topk_indices,
        token_expert_indices,
    ) -> None:
        self.run(
            gating_output,
            bias,
            is_padding,
            topk_weights,
            topk_indices,
            token_expert_indices,
            self.renormalize,
            1.0,
        )
