"""vLLM's `topk_sigmoid` on NVIDIA GPUs (slot 16)."""

from __future__ import annotations

from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_moe import VllmTopkSigmoid


@implementation(operator="topk_sigmoid", devices=("nvidia",), slot=16)
class NvidiaVllmTopkSigmoid(VllmTopkSigmoid):
    """`_moe_C::topk_sigmoid` from vLLM's CUDA build."""
