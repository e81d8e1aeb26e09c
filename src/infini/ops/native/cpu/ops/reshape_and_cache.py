"""CPU `reshape_and_cache` (slot 0): the shared KV-cache write kernel."""

from __future__ import annotations

from infini.ops.base._indexing import slot_error
from infini.ops.base.reshape_and_cache import ReshapeAndCache
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.kv_cache import CacheWrite
from infini.ops.native.cpu.precompile import index_dtypes, torch_dtypes


@implementation(operator="reshape_and_cache", devices=("cpu",), slot=0)
class CpuReshapeAndCache(ReshapeAndCache):
    def __init__(self, args) -> None:
        super().__init__(args)
        key, value = args.key, args.value
        key_cache, value_cache = args.key_cache, args.value_cache
        slot_mapping = args.slot_mapping
        tokens, heads, head_size = key.shape
        x = key_cache.shape[4]
        kh, kd = key.strides[1:]
        c0, c1, c2, c3, c4 = key_cache.strides
        v0, v1, v2, v3 = value_cache.strides
        self.write = CacheWrite(
            src_dtype=key.dtype,
            kv_cache_dtype=args.kv_cache_dtype,
            index_dtype=slot_mapping.dtype,
            append=False,
            batch=1,
            seq=tokens,
            index_strides=(0, slot_mapping.strides[0]),
            index_span=span(slot_mapping.shape, slot_mapping.strides),
            block_size=self.block_size,
            limit=self.slots,
            pairs=(
                (
                    key,
                    (0, key.strides[0]),
                    key_cache,
                    (c0, c3),
                    (heads, head_size // x, x),
                    (kh, kd * x, kd),
                    (c1, c2, c4),
                ),
                (
                    value,
                    (0, value.strides[0]),
                    value_cache,
                    (v0, v3),
                    (heads, head_size),
                    value.strides[1:],
                    (v1, v2),
                ),
            ),
        )

    def launch(
        self, stream, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale
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
        """Compiles the "auto" (copy) kernels for each dtype and slot index
        dtype, serial (decode) and parallel (prefill)."""
        import torch

        import infini.ops

        calls = 0
        scale = torch.ones(1)
        for dtype in torch_dtypes():
            x = 16 // dtype.itemsize
            key_cache = torch.zeros(32, 8, 128 // x, 16, x, dtype=dtype)
            value_cache = torch.zeros(32, 8, 128, 16, dtype=dtype)
            for index_dtype in index_dtypes():
                for tokens in (1, 512):
                    key = torch.zeros(tokens, 8, 128, dtype=dtype)
                    slots = torch.arange(tokens, dtype=index_dtype)
                    infini.ops.reshape_and_cache(
                        key,
                        key,
                        key_cache,
                        value_cache,
                        slots,
                        scale,
                        scale,
                        "auto",
                        implementation_index=0,
                    )
                    calls += 1
        return calls
