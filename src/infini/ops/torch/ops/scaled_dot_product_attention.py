"""PyTorch `scaled_dot_product_attention` (slot 1, every device)."""

from __future__ import annotations

from infini.ops.base.scaled_dot_product_attention import ScaledDotProductAttention
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context


@implementation(operator="scaled_dot_product_attention", devices="all", slot=1)
class TorchScaledDotProductAttention(ScaledDotProductAttention):
    """`torch.nn.functional.scaled_dot_product_attention` on float32 copies
    of the inputs (a float mask too), rounded once into `out`; dropout draws
    from torch's generator exactly as that call does."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.dropout_p = args.dropout_p
        self.is_causal = bool(args.is_causal)
        self.scale = args.scale
        self.enable_gqa = bool(args.enable_gqa)
        self.empty_keys = args.key.shape[-2] == 0

    def launch(self, stream, query, key, value, attn_mask, out) -> None:
        import torch.nn.functional as F

        with stream_context(self.device, stream):
            if self.empty_keys:
                out.zero_()
                return
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.float()
            result = F.scaled_dot_product_attention(
                query.float(),
                key.float(),
                value.float(),
                attn_mask=attn_mask,
                dropout_p=self.dropout_p,
                is_causal=self.is_causal,
                scale=self.scale,
                enable_gqa=self.enable_gqa,
            )
            out.copy_(result)
