"""flash-attn's `varlen_fwd` on NVIDIA GPUs (`flash_attn_2_cuda`) at slot 16."""

from __future__ import annotations

from infini.ops.core.registry import implementation
from infini.ops.linked.torch.flash_attn import FlashAttnVarlen


@implementation(operator="flash_attn_varlen_func", devices=("nvidia",), slot=16)
class NvidiaFlashAttnVarlenFunc(FlashAttnVarlen):
    """`flash::mha_varlen_fwd` from flash-attn's CUDA build."""
