"""`rotary_embedding`: vLLM rotary position embedding, in place."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._indexing import INDEX_DTYPES, VALUE_DTYPES, check_index_range


class RotaryEmbedding(Operator):
    """vLLM RoPE, applied **in place** to `query` and, when given, `key`.

    - `positions` is 1-D ``(tokens,)`` or 2-D ``(batch, seq)``; int32 or
      int64, each in ``[0, max_position)``.
    - `query` is flattened, ``positions.shape + (heads * head_size,)``, or
      structured, ``positions.shape + (heads, head_size)``; `key` likewise
      with its own head count (grouped-query attention). Any strides.
    - `cos_sin_cache` is ``(max_position, rot_dim)``: row ``p`` holds the
      ``rot_dim / 2`` cosines then the ``rot_dim / 2`` sines for position
      ``p``. `rot_dim` is even and ``rope_dim_offset + rot_dim <= head_size``.
    - In each head the ``rot_dim`` elements starting at `rope_dim_offset`
      rotate; the rest are untouched. With ``half = rot_dim / 2``, pair ``i``
      is ``(x[i], x[i + half])`` for NeoX (`is_neox`) and
      ``(x[2i], x[2i + 1])`` for GPT-J, and becomes
      ``(x*cos[i] - y*sin[i], y*cos[i] + x*sin[i])``. `inverse` negates the
      sines (undoes the rotation).
    - float32, float16 and bfloat16; `query` and `key` share a dtype, the
      cache may have any of the three. Computed in float32, rounded once.
    """

    name = "rotary_embedding"
    trace_name = "RotaryEmbedding"
    overloads = (
        "positions: Tensor, query: Tensor!, key: Tensor|None!, "
        "cos_sin_cache: Tensor, head_size: int, is_neox: bool, "
        "rope_dim_offset: int = 0, inverse: bool = false",
    )
    defaults = {"key": None, "rope_dim_offset": 0, "inverse": False}

    def __init__(self, args) -> None:
        super().__init__(args)
        positions, query, key = args.positions, args.query, args.key
        cache = args.cos_sin_cache
        head_size, offset = args.head_size, args.rope_dim_offset
        self.require_dtype("positions", positions, INDEX_DTYPES)
        self.require_dtype("query", query, VALUE_DTYPES)
        self.require_dtype("cos_sin_cache", cache, VALUE_DTYPES)
        if key is not None:
            self.require_same_dtype("query", {"query": query, "key": key})
        self.require_ndim("positions", positions, (1, 2))
        self.require_ndim("cos_sin_cache", cache, (2,))
        if head_size <= 0:
            raise self.error(f"`head_size` must be positive, got {head_size}.")
        self.max_position, self.rot_dim = cache.shape
        rot_dim = self.rot_dim
        if rot_dim <= 0 or rot_dim % 2:
            raise self.error(
                "`cos_sin_cache` must have an even, positive number of columns "
                f"(the rotary dimension), got shape {cache.shape}."
            )
        if offset < 0 or offset + rot_dim > head_size:
            raise self.error(
                f"`rope_dim_offset` ({offset}) plus the rotary dimension "
                f"({rot_dim}) must fit in `head_size` ({head_size})."
            )
        self.tokens_shape = positions.shape
        self.query_heads = self._heads("query", query, head_size)
        self.key_heads = 0 if key is None else self._heads("key", key, head_size)

    def _heads(self, name: str, meta, head_size: int) -> int:
        """The head count of `query` or `key`, checking its shape."""
        leading = self.tokens_shape
        if meta.ndim == len(leading) + 2:
            if meta.shape[:-2] != leading or meta.shape[-1] != head_size:
                raise self.error(
                    f"`{name}` of shape {meta.shape} must be `positions.shape` "
                    f"{leading} + (heads, {head_size}) or `positions.shape` + "
                    f"(heads * {head_size},)."
                )
            heads = meta.shape[-2]
        elif meta.ndim == len(leading) + 1:
            if meta.shape[:-1] != leading or meta.shape[-1] % head_size:
                raise self.error(
                    f"`{name}` of shape {meta.shape} must be `positions.shape` "
                    f"{leading} + (heads * {head_size},) or `positions.shape` + "
                    f"(heads, {head_size})."
                )
            heads = meta.shape[-1] // head_size
        else:
            raise self.error(
                f"`{name}` must have {len(leading) + 1} or {len(leading) + 2} "
                f"dimensions for {len(leading)}-D `positions`, got shape "
                f"{meta.shape}."
            )
        self.require_writable(name, meta)
        return heads

    def head_strides(self, meta, head_size: int) -> tuple[int, int]:
        """``(head stride, element stride)`` of `query` or `key`, in elements."""
        if meta.ndim == len(self.tokens_shape) + 2:
            return meta.strides[-2], meta.strides[-1]
        return head_size * meta.strides[-1], meta.strides[-1]

    def check_positions(self, positions) -> None:
        """Raises unless every position indexes a row of `cos_sin_cache`
        (for implementations that do not check inside their kernel)."""
        check_index_range(
            self,
            "positions",
            positions,
            0,
            self.max_position,
            "the rows of `cos_sin_cache`",
        )
