"""CPU `topk_softmax` (slot 0): one Numba kernel over tokens."""

from __future__ import annotations

from infini.ops.base.topk_softmax import TopkSoftmax
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import torch_dtypes
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

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial (few tokens) and parallel kernels; dtypes are
        run-time codes of one compilation."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for tokens in (1, 512):
                gating = torch.zeros(tokens, 64, dtype=dtype)
                weights = torch.empty(tokens, 8)
                ids = torch.empty(tokens, 8, dtype=torch.int32)
                token_ids = torch.empty(tokens, 8, dtype=torch.int32)
                infini.ops.topk_softmax(
                    gating,
                    None,
                    None,
                    True,
                    weights,
                    ids,
                    token_ids,
                    implementation_index=0,
                )
                calls += 1
        return calls
