"""PyTorch `rotary_embedding` (slot 1, every device)."""

from __future__ import annotations

from infini.ops.base.rotary_embedding import RotaryEmbedding
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context


@implementation(operator="rotary_embedding", devices="all", slot=1)
class TorchRotaryEmbedding(RotaryEmbedding):
    """vLLM RoPE with torch ops: the cache rows of `positions` give cos and
    sin, each pair rotates in float32 and is written back (rounded once)."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.head_size = args.head_size
        self.offset = args.rope_dim_offset
        self.is_neox = args.is_neox
        self.inverse = args.inverse

    def _rotate(self, tensor, heads, cos, sin) -> None:
        leading = self.tokens_shape
        if tensor.dim() == len(leading) + 1:
            tensor = tensor.unflatten(-1, (heads, self.head_size))
        rotary = tensor[..., self.offset : self.offset + self.rot_dim]
        half = self.rot_dim // 2
        if self.is_neox:
            x, y = rotary[..., :half], rotary[..., half:]
        else:
            x, y = rotary[..., 0::2], rotary[..., 1::2]
        x32, y32 = x.float(), y.float()
        rotated_x = x32 * cos - y32 * sin
        rotated_y = y32 * cos + x32 * sin
        x.copy_(rotated_x)
        y.copy_(rotated_y)

    def launch(self, stream, positions, query, key, cos_sin_cache) -> None:
        self.check_positions(positions)
        with stream_context(self.device, stream):
            rows = cos_sin_cache[positions.long()].float()
            half = self.rot_dim // 2
            # One row per token, broadcast over the heads.
            cos = rows[..., :half].unsqueeze(-2)
            sin = rows[..., half:].unsqueeze(-2)
            if self.inverse:
                sin = -sin
            self._rotate(query, self.query_heads, cos, sin)
            if key is not None:
                self._rotate(key, self.key_heads, cos, sin)
