"""`paged_caching_infinilm`: InfiniLM's paged KV-cache write."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._indexing import INDEX_DTYPES, VALUE_DTYPES, check_slots


class PagedCachingInfinilm(Operator):
    """For each token ``t`` with ``(b, o) = divmod(slot_mapping[t],
    block_size)``: ``k_cache[b, :, o, :] = k[t]`` and
    ``v_cache[b, :, o, :] = v[t]``.

    - `k` is ``(tokens, kv_heads, head_size)`` and `v`
      ``(tokens, kv_heads, head_size_v)``; `slot_mapping` is ``(tokens,)``,
      int32 or int64.
    - `k_cache` is ``(blocks, kv_heads, block_size, head_size)`` and
      `v_cache` ``(blocks, kv_heads, block_size, head_size_v)``; any strides.
    - Negative slots are skipped (padding, as in vLLM); slots must be below
      ``blocks * block_size``.
    - float32, float16 and bfloat16; one dtype for all four tensors. Exact
      copies.
    """

    name = "paged_caching_infinilm"
    trace_name = "PagedCachingInfinilm"
    overloads = (
        "k: Tensor, v: Tensor, slot_mapping: Tensor, k_cache: Tensor!, "
        "v_cache: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        k, v, slot_mapping = args.k, args.v, args.slot_mapping
        k_cache, v_cache = args.k_cache, args.v_cache
        self.require_dtype("k", k, VALUE_DTYPES)
        self.require_same_dtype(
            "k", {"k": k, "v": v, "k_cache": k_cache, "v_cache": v_cache}
        )
        self.require_dtype("slot_mapping", slot_mapping, INDEX_DTYPES)
        self.require_ndim("k", k, (3,))
        self.require_ndim("v", v, (3,))
        if v.shape[:2] != k.shape[:2]:
            raise self.error(
                f"`v` of shape {v.shape} must have the tokens and heads of `k` "
                f"{k.shape[:2]}."
            )
        tokens, heads, head_size = k.shape
        self.require_shape(
            "slot_mapping", slot_mapping, (tokens,), "(one slot per token of `k`)"
        )
        self.require_ndim("k_cache", k_cache, (4,))
        blocks, _, block_size, _ = k_cache.shape
        self.require_shape(
            "k_cache",
            k_cache,
            (blocks, heads, block_size, head_size),
            "(blocks, kv_heads, block_size, head_size)",
        )
        self.require_shape(
            "v_cache",
            v_cache,
            (blocks, heads, block_size, v.shape[2]),
            "(blocks, kv_heads, block_size, head_size of `v`)",
        )
        self.require_writable("k_cache", k_cache)
        self.require_writable("v_cache", v_cache)
        self.block_size = block_size
        self.slots = blocks * block_size

    def check_slots(self, slot_mapping) -> None:
        """Raises unless every slot fits the caches (for implementations that
        do not check inside their kernel)."""
        check_slots(self, slot_mapping, self.slots)
