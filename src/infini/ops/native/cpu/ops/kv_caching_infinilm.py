"""CPU `kv_caching_infinilm` (slot 0): the shared KV-cache write kernel in
append mode."""

from __future__ import annotations

from infini.ops.base.kv_caching_infinilm import KvCachingInfinilm
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.kv_cache import CacheWrite
from infini.ops.native.cpu.precompile import index_dtypes, torch_dtypes


def append_pair(source, cache):
    """The `CacheWrite` entry for ``cache[b, :, position, :] = source[b, :, s]``
    with tensors of shape ``(batch, heads, length, head)``."""
    s0, s1, s2, s3 = source.strides
    c0, c1, c2, c3 = cache.strides
    return (
        source,
        (s0, s2),
        cache,
        (c0, c2),
        (source.shape[1], source.shape[3]),
        (s1, s3),
        (c1, c3),
    )


@implementation(operator="kv_caching_infinilm", devices=("cpu",), slot=0)
class CpuKvCachingInfinilm(KvCachingInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        k, lengths = args.k, args.past_kv_lengths
        self.write = CacheWrite(
            src_dtype=k.dtype,
            kv_cache_dtype="auto",
            index_dtype=lengths.dtype,
            append=True,
            batch=k.shape[0],
            seq=k.shape[2],
            index_strides=(lengths.strides[0], 0),
            index_span=span(lengths.shape, lengths.strides),
            block_size=1,
            limit=self.max_length,
            pairs=(append_pair(k, args.k_cache), append_pair(args.v, args.v_cache)),
        )

    def launch(self, stream, k, v, past_kv_lengths, k_cache, v_cache) -> None:
        bad = self.write(
            k_cache.data_ptr(),
            k.data_ptr(),
            v_cache.data_ptr(),
            v.data_ptr(),
            past_kv_lengths.data_ptr(),
        )
        if bad >= 0:
            raise self.length_error(bad, int(past_kv_lengths[bad]))

    @classmethod
    def precompile(cls) -> int:
        """Compiles the append kernels for each dtype and length index dtype,
        serial (decode) and parallel (prefill)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            # Separate caches: written tensors must not share memory.
            k_cache = torch.zeros(1, 8, 512, 128, dtype=dtype)
            v_cache = torch.zeros_like(k_cache)
            for index_dtype in index_dtypes():
                for seq in (1, 512):
                    k = torch.zeros(1, 8, seq, 128, dtype=dtype)
                    lengths = torch.zeros(1, dtype=index_dtype)
                    infini.ops.kv_caching_infinilm(
                        k, k, lengths, k_cache, v_cache, implementation_index=0
                    )
                    calls += 1
        return calls
