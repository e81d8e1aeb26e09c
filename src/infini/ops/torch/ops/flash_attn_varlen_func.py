"""PyTorch `flash_attn_varlen_func` (slot 8, NVIDIA only)."""

from __future__ import annotations

import math

from infini.ops.base.flash_attn_varlen_func import FlashAttnVarlenFunc
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context


@implementation(operator="flash_attn_varlen_func", devices=("nvidia",), slot=8)
class TorchFlashAttnVarlenFunc(FlashAttnVarlenFunc):
    """FlashAttention-2 varlen forward in torch: per sequence, the scores in
    float32, bottom-right aligned causal/window masks, softcap, GQA. Slot 8
    as in the original, where it is the torch backend of this operator."""

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
            )


def varlen_attention(
    q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, *, scale, causal, window, softcap
) -> None:
    """The computation, on any device (the CPU tests call it directly)."""
    import torch

    starts_q = cu_seqlens_q.tolist()
    starts_k = cu_seqlens_k.tolist()
    groups = q.shape[1] // k.shape[1]
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
        key = k[k_begin:k_end].float().transpose(0, 1)
        value = v[k_begin:k_end].float().transpose(0, 1)
        if groups > 1:
            key = key.repeat_interleave(groups, dim=0)
            value = value.repeat_interleave(groups, dim=0)
        scores = (query @ key.transpose(-1, -2)) * scale
        if softcap > 0:
            scores = torch.tanh(scores / softcap) * softcap
        rows = torch.arange(length_q, device=q.device).unsqueeze(1)
        columns = torch.arange(length_k, device=q.device).unsqueeze(0)
        position = rows + (length_k - length_q)
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
