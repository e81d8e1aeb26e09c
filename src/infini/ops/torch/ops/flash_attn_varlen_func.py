"""PyTorch `flash_attn_varlen_func` (slot 8, NVIDIA only)."""

from __future__ import annotations

import math

from infini.ops.base.flash_attn_varlen_func import FlashAttnVarlenFunc
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context


@implementation(operator="flash_attn_varlen_func", devices=("nvidia",), slot=8)
class TorchFlashAttnVarlenFunc(FlashAttnVarlenFunc):
    """FlashAttention-2 varlen forward in torch: per sequence, the scores in
    float32, bottom-right aligned causal/window masks, softcap, ALiBi, GQA,
    paged keys. Slot 8 as in the original, where it is the torch backend of
    this operator."""

    def launch(
        self, stream, q, k, v, cu_seqlens_q, cu_seqlens_k, alibi, table, out, lse, s
    ) -> None:
        with stream_context(self.device, stream):
            varlen_attention(
                q,
                k,
                v,
                cu_seqlens_q,
                cu_seqlens_k,
                out,
                lse,
                scale=self.scale,
                causal=self.causal,
                window=self.window,
                softcap=self.softcap,
                alibi_slopes=alibi,
                block_table=table,
            )


def varlen_attention(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    out,
    lse,
    *,
    scale,
    causal,
    window,
    softcap,
    alibi_slopes=None,
    block_table=None,
) -> None:
    """The computation, on any device (the CPU tests call it directly).
    With `block_table`, `k` and `v` are paged caches ``(blocks, block_size,
    kv_heads, dim)``."""
    import torch

    starts_q = cu_seqlens_q.tolist()
    starts_k = cu_seqlens_k.tolist()
    groups = q.shape[1] // k.shape[-2]
    left, right = window
    if causal:
        right = 0
    for index in range(len(starts_q) - 1):
        q_begin, q_end = starts_q[index], starts_q[index + 1]
        k_begin, k_end = starts_k[index], starts_k[index + 1]
        length_q, length_k = q_end - q_begin, k_end - k_begin
        if length_q == 0:
            continue
        query = q[q_begin:q_end].float().transpose(0, 1)  # (heads, Lq, D)
        if block_table is None:
            key, value = k[k_begin:k_end], v[k_begin:k_end]
        else:
            pages = block_table[index, : -(-length_k // k.shape[1])].long()
            key = k[pages].flatten(0, 1)[:length_k]
            value = v[pages].flatten(0, 1)[:length_k]
        key = key.float().transpose(0, 1)
        value = value.float().transpose(0, 1)
        if groups > 1:
            key = key.repeat_interleave(groups, dim=0)
            value = value.repeat_interleave(groups, dim=0)
        scores = (query @ key.transpose(-1, -2)) * scale
        if softcap > 0:
            scores = torch.tanh(scores / softcap) * softcap
        rows = torch.arange(length_q, device=q.device).unsqueeze(1)
        columns = torch.arange(length_k, device=q.device).unsqueeze(0)
        position = rows + (length_k - length_q)
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[index]
            distance = (columns - position).abs().float()
            scores = scores - slopes.float()[:, None, None] * distance
        keep = torch.ones(length_q, length_k, dtype=torch.bool, device=q.device)
        if right >= 0:
            keep &= columns <= position + right
        if left >= 0:
            keep &= columns >= position - left
        scores = scores.masked_fill(~keep, -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)  # (heads, Lq)
        weights = torch.exp(scores - row_lse.unsqueeze(-1))
        weights = torch.nan_to_num(weights, nan=0.0)  # rows with no key left
        result = (weights @ value).transpose(0, 1)
        out[q_begin:q_end].copy_(result)
        if lse is not None:
            lse[:, q_begin:q_end].copy_(row_lse)
