"""vLLM's `topk_softmax` on NVIDIA GPUs (slot 16)."""

from __future__ import annotations

from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_moe import VllmTopkSoftmax


@implementation(operator="topk_softmax", devices=("nvidia",), slot=16)
class NvidiaVllmTopkSoftmax(VllmTopkSoftmax):
    """`_moe_C::topk_softmax` from vLLM's CUDA build."""
