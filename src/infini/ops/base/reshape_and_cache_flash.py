"""`reshape_and_cache_flash`: vLLM's flash-layout KV-cache write."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._indexing import INDEX_DTYPES, check_kv_cache_dtype, check_slots
from .reshape_and_cache import KEY_DTYPES


class ReshapeAndCacheFlash(Operator):
    """Writes tokens' `key` and `value` into flash-layout caches:
    ``key_cache[b, o] = key[t]`` and ``value_cache[b, o] = value[t]`` with
    ``(b, o) = divmod(slot_mapping[t], block_size)``.

    - `key` is ``(tokens, heads, head_size)`` and `value`
      ``(tokens, heads, head_size_v)``; `slot_mapping` is ``(n,)`` with
      ``n <= tokens``, int32 or int64: only the first `n` tokens are written
      (the rest is padding, as in vLLM V1).
    - `key_cache` is ``(blocks, block_size, heads, head_size)`` and
      `value_cache` ``(blocks, block_size, heads, head_size_v)`` (NHD); the
      HND layout is passed as a permuted view of the same shape. Any strides.
    - Negative slots are skipped; slots must be below ``blocks * block_size``.
    - `kv_cache_dtype` "auto": caches have `key`'s dtype and get exact
      copies. "fp8" / "fp8_e4m3" / "fp8_e5m2": caches are uint8 and get
      ``fp8(x / scale)`` (`k_scale` for keys, `v_scale` for values: float32
      tensors of one element), rounded to nearest even and saturated to the
      largest finite fp8 value, as vLLM's CUDA kernels do. The scales are
      not read in "auto" mode.
    - float32, float16 and bfloat16 inputs, one dtype.
    """

    name = "reshape_and_cache_flash"
    trace_name = "ReshapeAndCacheFlash"
    overloads = (
        "key: Tensor, value: Tensor, slot_mapping: Tensor, k_scale: Tensor, "
        "v_scale: Tensor, kv_cache_dtype: str, key_cache: Tensor!, "
        "value_cache: Tensor!",
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
        self.require_ndim("value", value, (3,))
        if value.shape[:2] != key.shape[:2]:
            raise self.error(
                f"`value` of shape {value.shape} must have the tokens and heads "
                f"of `key` {key.shape[:2]}."
            )
        tokens, heads, head_size = key.shape
        self.require_ndim("slot_mapping", slot_mapping, (1,))
        if slot_mapping.shape[0] > tokens:
            raise self.error(
                f"`slot_mapping` has {slot_mapping.shape[0]} slots but `key` only "
                f"{tokens} tokens."
            )
        self.require_ndim("key_cache", key_cache, (4,))
        blocks, block_size = key_cache.shape[:2]
        self.require_shape(
            "key_cache",
            key_cache,
            (blocks, block_size, heads, head_size),
            "(blocks, block_size, heads, head_size)",
        )
        self.require_shape(
            "value_cache",
            value_cache,
            (blocks, block_size, heads, value.shape[2]),
            "(blocks, block_size, heads, head_size of `value`)",
        )
        self.require_writable("key_cache", key_cache)
        self.require_writable("value_cache", value_cache)
        self.block_size = block_size
        self.slots = blocks * block_size

    def check_slots(self, slot_mapping) -> None:
        """Raises unless every slot fits the caches (for implementations that
        do not check inside their kernel)."""
        check_slots(self, slot_mapping, self.slots)
