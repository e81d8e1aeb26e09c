"""vLLM's `moe_wna16_marlin_gemm` on NVIDIA GPUs
(`_moe_C::moe_wna16_marlin_gemm`) at slot 16."""

from __future__ import annotations

from infini.ops.base.moe_wna16_marlin_gemm import MoeWna16MarlinGemm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.transports import dispatcher_operator

SCALARS = (
    "moe_block_size",
    "top_k",
    "mul_topk_weights",
    "b_type_id",
    "size_m",
    "size_n",
    "size_k",
    "is_full_k",
    "use_atomic_add",
    "use_fp32_reduce",
    "is_zp_float",
    "thread_k",
    "thread_n",
    "blocks_per_sm",
)


@implementation(operator="moe_wna16_marlin_gemm", devices=("nvidia",), slot=16)
class NvidiaVllmMoeWna16MarlinGemm(MoeWna16MarlinGemm):
    """vLLM writes into `out` (its `c_or_none`); the routing indices go to
    it as int32 (converted when int64). Every other argument passes as
    given: the base checked them against vLLM's own rules."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.scalars = tuple(getattr(args, name) for name in SCALARS)
        self.kernel = dispatcher_operator(__name__, self.device.platform)

    def launch(
        self, stream, a, b_q_weight, b_bias_or_none, b_scales, a_scales,
        global_scale, b_zeros_or_none, g_idx_or_none, perm_or_none, workspace,
        sorted_token_ids, expert_ids, num_tokens_past_padded, topk_weights, out,
    ) -> None:  # fmt: skip
        import torch

        with stream_context(self.device, stream):
            self.kernel(
                a,
                out,
                b_q_weight,
                b_bias_or_none,
                b_scales,
                a_scales,
                global_scale,
                b_zeros_or_none,
                g_idx_or_none,
                perm_or_none,
                workspace,
                sorted_token_ids.to(torch.int32),
                expert_ids.to(torch.int32),
                num_tokens_past_padded.to(torch.int32),
                topk_weights,
                *self.scalars,
            )
