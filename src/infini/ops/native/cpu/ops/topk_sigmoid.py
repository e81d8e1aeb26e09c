"""CPU `topk_sigmoid` (slot 0): one Numba kernel over tokens."""

from __future__ import annotations

from infini.ops.base.topk_sigmoid import TopkSigmoid
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import torch_dtypes
from infini.ops.native.cpu.routing import TopkGatingLaunch


@implementation(operator="topk_sigmoid", devices=("cpu",), slot=0)
class CpuTopkSigmoid(TopkGatingLaunch, TopkSigmoid):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(
            "sigmoid",
            args.gating_output,
            args.e_score_correction_bias,
            args.is_padding,
            args.topk_weights,
            args.topk_ids,
            args.token_expert_indices,
        )

    def launch(
        self,
        stream,
        gating_output,
        e_score_correction_bias,
        is_padding,
        topk_weights,
        topk_ids,
        token_expert_indices,
    ) -> None:
        self.run(
            gating_output,
            e_score_correction_bias,
            is_padding,
            topk_weights,
            topk_ids,
            token_expert_indices,
            self.renormalize,
            self.routed_scaling_factor,
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
                gating = torch.zeros(tokens, 128, dtype=dtype)
                bias = torch.zeros(128)
                weights = torch.empty(tokens, 8)
                ids = torch.empty(tokens, 8, dtype=torch.int32)
                token_ids = torch.empty(tokens, 8, dtype=torch.int32)
                infini.ops.topk_sigmoid(
                    gating,
                    bias,
                    None,
                    True,
                    2.5,
                    weights,
                    ids,
                    token_ids,
                    implementation_index=0,
                )
                calls += 1
        return calls
