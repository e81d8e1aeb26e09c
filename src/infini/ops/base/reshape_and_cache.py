"""`reshape_and_cache`: vLLM's paged KV-cache write."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._indexing import INDEX_DTYPES, check_kv_cache_dtype, check_slots

KEY_DTYPES = ("float32", "float16", "bfloat16")


class ReshapeAndCache(Operator):
    """Writes each token's `key` and `value` into vLLM's paged caches.

    - `key` and `value` are ``(tokens, heads, head_size)``; `slot_mapping`
      is ``(tokens,)``, int32 or int64.
    - `key_cache` is ``(blocks, heads, head_size / x, block_size, x)`` and
      `value_cache` ``(blocks, heads, head_size, block_size)``; any strides.
    - Token ``t`` with ``slot = slot_mapping[t]`` and
      ``(b, o) = divmod(slot, block_size)`` writes
      ``key_cache[b, h, d // x, o, d % x] = key[t, h, d]`` and
      ``value_cache[b, h, d, o] = value[t, h, d]``. Negative slots are
      skipped; slots must be below ``blocks * block_size``.
    - `kv_cache_dtype` "auto": caches have `key`'s dtype and get exact
      copies. "fp8" / "fp8_e4m3" / "fp8_e5m2": caches are uint8 and get
      ``fp8(x / scale)`` (`k_scale` for keys, `v_scale` for values: float32
      tensors of one element), rounded to nearest even and saturated to the
      largest finite fp8 value, as vLLM's CUDA kernels do. The scales are
      not read in "auto" mode.
    - float32, float16 and bfloat16 inputs, one dtype.
    """

    name = "reshape_and_cache"
    trace_name = "ReshapeAndCache"
    overloads = (
        "key: Tensor, value: Tensor, key_cache: Tensor!, value_cache: Tensor!, "
        "slot_mapping: Tensor, k_scale: Tensor, v_scale: Tensor, "
        "kv_cache_dtype: str",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        key, value = args.key, args.value
        key_cache, value_cache = args.key_cache, args.value_cache
        slot_mapping = args.slot_mapping
        self.require_dtype("key", key, KEY_DTYPES)
        self.require_same_dtype("key", {"key": key, "value": value})
        self.require_dtype("slot_mapping", slot_mapping, INDEX_DTYPES)
        self.fp8 = check_kv_cache_dtype(
            self, args, {"key_cache": key_cache, "value_cache": value_cache}
        )
        self.require_ndim("key", key, (3,))
        self.require_shape("value", value, key.shape, "(the shape of `key`)")
        tokens, heads, head_size = key.shape
        self.require_shape(
            "slot_mapping", slot_mapping, (tokens,), "(one slot per token of `key`)"
        )
        self.require_ndim("key_cache", key_cache, (5,))
        blocks, _, _, block_size, x = key_cache.shape
        if x <= 0 or head_size % x:
            raise self.error(
                f"the last dimension of `key_cache` (x = {x}) must divide the "
                f"head size of `key` ({head_size}), got shape {key_cache.shape}."
            )
        self.require_shape(
            "key_cache",
            key_cache,
            (blocks, heads, head_size // x, block_size, x),
            "(blocks, heads, head_size / x, block_size, x)",
        )
        self.require_shape(
            "value_cache",
            value_cache,
            (blocks, heads, head_size, block_size),
            "(blocks, heads, head_size, block_size)",
        )
        self.require_writable("key_cache", key_cache)
        self.require_writable("value_cache", value_cache)
        self.block_size = block_size
        self.slots = blocks * block_size

    def check_slots(self, slot_mapping) -> None:
        """Raises unless every slot fits the caches (for implementations that
        do not check inside their kernel)."""
        check_slots(self, slot_mapping, self.slots)
