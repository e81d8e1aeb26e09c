"""flash-attn's `fwd_kvcache` on NVIDIA GPUs (`flash_attn_2_cuda`) at slot 16."""

from __future__ import annotations

from infini.ops.core.registry import implementation
from infini.ops.linked.torch.flash_attn import FlashAttnKvcache


@implementation(operator="flash_attn_with_kvcache", devices=("nvidia",), slot=16)
class NvidiaFlashAttnWithKvcache(FlashAttnKvcache):
    """`flash::mha_fwd_kvcache` from flash-attn's CUDA build."""
