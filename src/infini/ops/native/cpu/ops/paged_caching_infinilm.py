"""CPU `paged_caching_infinilm` (slot 0): the shared KV-cache write kernel."""

from __future__ import annotations

from functools import partial

from infini.ops.base._indexing import slot_error
from infini.ops.base.paged_caching_infinilm import PagedCachingInfinilm
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.kv_cache import CacheWrite
from infini.ops.native.cpu.precompile import index_dtypes, torch_dtypes


def head_major_pair(source, cache):
    """The `CacheWrite` entry for ``cache[block, :, offset, :] = source[token]``
    with a cache of shape ``(blocks, heads, block_size, head)``."""
    c0, c1, c2, c3 = cache.strides
    return (
        source,
        (0, source.strides[0]),
        cache,
        (c0, c2),
        source.shape[1:],
        source.strides[1:],
        (c1, c3),
    )


@implementation(operator="paged_caching_infinilm", devices=("cpu",), slot=0)
class CpuPagedCachingInfinilm(PagedCachingInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        slot_mapping = args.slot_mapping
        self.write = CacheWrite(
            src_dtype=args.k.dtype,
            kv_cache_dtype="auto",
            index_dtype=slot_mapping.dtype,
            append=False,
            batch=1,
            seq=slot_mapping.shape[0],
            index_strides=(0, slot_mapping.strides[0]),
            index_span=span(slot_mapping.shape, slot_mapping.strides),
            block_size=self.block_size,
            limit=self.slots,
            pairs=(
                head_major_pair(args.k, args.k_cache),
                head_major_pair(args.v, args.v_cache),
            ),
        )

    def launch(self, stream, k, v, slot_mapping, k_cache, v_cache) -> None:
        bad = self.write(
            k_cache.data_ptr(),
            k.data_ptr(),
            v_cache.data_ptr(),
            v.data_ptr(),
            slot_mapping.data_ptr(),
        )
        if bad >= 0:
            self._bad_slot(slot_mapping, bad)

    def bind_launch(self, stream, k, v, slot_mapping, k_cache, v_cache):
        return self.write.bind(
            k_cache.data_ptr(),
            k.data_ptr(),
            v_cache.data_ptr(),
            v.data_ptr(),
            slot_mapping.data_ptr(),
            partial(self._bad_slot, slot_mapping),
        )

    def _bad_slot(self, slot_mapping, bad: int) -> None:
        raise slot_error(self, bad, int(slot_mapping[bad]), self.slots)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernels for each dtype and slot index dtype, serial
        (decode) and parallel (prefill)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            # Separate caches: written tensors must not share memory.
            k_cache = torch.zeros(32, 8, 16, 128, dtype=dtype)
            v_cache = torch.zeros_like(k_cache)
            for index_dtype in index_dtypes():
                for tokens in (1, 512):
                    k = torch.zeros(tokens, 8, 128, dtype=dtype)
                    slots = torch.arange(tokens, dtype=index_dtype)
                    infini.ops.paged_caching_infinilm(
                        k, k, slots, k_cache, v_cache, implementation_index=0
                    )
                    calls += 1
        return calls
