"""CPU `reshape_and_cache_flash` (slot 0): the shared KV-cache write kernel."""

from __future__ import annotations

from infini.ops.base._indexing import slot_error
from infini.ops.base.reshape_and_cache_flash import ReshapeAndCacheFlash
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.kv_cache import CacheWrite


def slot_pair(source, cache):
    """The `CacheWrite` entry for ``cache[block, offset] = source[token]``
    with a cache of shape ``(blocks, block_size, heads, head)``."""
    return (
        source,
        (0, source.strides[0]),
        cache,
        cache.strides[:2],
        source.shape[1:],
        source.strides[1:],
        cache.strides[2:],
    )


@implementation(operator="reshape_and_cache_flash", devices=("cpu",), slot=0)
class CpuReshapeAndCacheFlash(ReshapeAndCacheFlash):
    def __init__(self, args) -> None:
        super().__init__(args)
        slot_mapping = args.slot_mapping
        self.write = CacheWrite(
            src_dtype=args.key.dtype,
            kv_cache_dtype=args.kv_cache_dtype,
            index_dtype=slot_mapping.dtype,
            append=False,
            batch=1,
            seq=slot_mapping.shape[0],
            index_strides=(0, slot_mapping.strides[0]),
            index_span=span(slot_mapping.shape, slot_mapping.strides),
            block_size=self.block_size,
            limit=self.slots,
            pairs=(
                slot_pair(args.key, args.key_cache),
                slot_pair(args.value, args.value_cache),
            ),
        )

    def launch(
        self, stream, key, value, slot_mapping, k_scale, v_scale, key_cache, value_cache
    ) -> None:
        scales = (k_scale.data_ptr(), v_scale.data_ptr()) if self.fp8 else (0, 0)
        bad = self.write(
            key_cache.data_ptr(),
            key.data_ptr(),
            value_cache.data_ptr(),
            value.data_ptr(),
            slot_mapping.data_ptr(),
            *scales,
        )
        if bad >= 0:
            raise slot_error(self, bad, int(slot_mapping[bad]), self.slots)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the "auto" (copy) kernels, which depend only on the
        element size, for int64 slots at decode and prefill sizes."""
        import torch

        import infini.ops

        calls = 0
        for dtype in (torch.float32, torch.bfloat16):
            scale = torch.ones(1)
            for tokens in (1, 512):
                key = torch.zeros(tokens, 8, 128, dtype=dtype)
                cache = torch.zeros(32, 16, 8, 128, dtype=dtype)
                slots = torch.arange(tokens, dtype=torch.int64)
                infini.ops.reshape_and_cache_flash(
                    key,
                    key,
                    slots,
                    scale,
                    scale,
                    "auto",
                    cache,
                    cache,
                    implementation_index=0,
                )
                calls += 1
        return calls
