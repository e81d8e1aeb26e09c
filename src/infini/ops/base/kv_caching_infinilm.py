"""`kv_caching_infinilm`: appends new keys and values to contiguous caches."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._indexing import INDEX_DTYPES, VALUE_DTYPES


class KvCachingInfinilm(Operator):
    """``k_cache[b, :, p:p + seq, :] = k[b]`` and likewise for `v`, with
    ``p = past_kv_lengths[b]``.

    - `k` is ``(batch, kv_heads, seq, head_size)`` and `v`
      ``(batch, kv_heads, seq, head_size_v)``; `past_kv_lengths` is
      ``(batch,)``, int32 or int64.
    - `k_cache` is ``(batch, kv_heads, max_len, head_size)`` and `v_cache`
      ``(batch, kv_heads, max_len, head_size_v)``; any strides.
    - Each ``past_kv_lengths[b]`` lies in ``[0, max_len - seq]``.
    - float32, float16 and bfloat16; one dtype for all four tensors. Exact
      copies.
    """

    name = "kv_caching_infinilm"
    trace_name = "KvCachingInfinilm"
    overloads = (
        "k: Tensor, v: Tensor, past_kv_lengths: Tensor, k_cache: Tensor!, "
        "v_cache: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        k, v, lengths = args.k, args.v, args.past_kv_lengths
        k_cache, v_cache = args.k_cache, args.v_cache
        self.require_dtype("k", k, VALUE_DTYPES)
        self.require_same_dtype(
            "k", {"k": k, "v": v, "k_cache": k_cache, "v_cache": v_cache}
        )
        self.require_dtype("past_kv_lengths", lengths, INDEX_DTYPES)
        self.require_ndim("k", k, (4,))
        self.require_ndim("v", v, (4,))
        if v.shape[:3] != k.shape[:3]:
            raise self.error(
                f"`v` of shape {v.shape} must have the batch, heads and sequence "
                f"length of `k` {k.shape[:3]}."
            )
        batch, heads, seq, head_size = k.shape
        self.require_shape(
            "past_kv_lengths", lengths, (batch,), "(one length per batch entry)"
        )
        self.require_ndim("k_cache", k_cache, (4,))
        self.max_length = max_length = k_cache.shape[2]
        self.require_shape(
            "k_cache",
            k_cache,
            (batch, heads, max_length, head_size),
            "(batch, kv_heads, max_len, head_size)",
        )
        self.require_shape(
            "v_cache",
            v_cache,
            (batch, heads, max_length, v.shape[3]),
            "(batch, kv_heads, max_len, head_size of `v`)",
        )
        if seq > max_length:
            raise self.error(
                f"`k` has {seq} new tokens but the caches hold only {max_length}."
            )
        self.require_writable("k_cache", k_cache)
        self.require_writable("v_cache", v_cache)
        self.seq = seq

    def length_error(self, position: int, value: int):
        """The `ValueError` for a past length that leaves no room."""
        limit = self.max_length - self.seq
        return self.error(
            f"`past_kv_lengths[{int(position)}]` is {int(value)}, but with {self.seq} "
            f"new tokens and caches of length {self.max_length} it must lie in "
            f"[0, {limit}]; nothing was written."
        )
