"""CUDA-like `kv_caching_infinilm` (slot 0) in Triton: appends new keys and
values to contiguous caches.

A program writes a tile of ``ROWS`` rows by the head: row ``r`` is token
``s = r % seq`` of head ``h = (r // seq) % kv_heads`` of batch entry ``b =
r // (seq * kv_heads)``, and goes to ``cache[b, h, past_kv_lengths[b] + s,
:]``. Rows are read and written contiguously along the head (128-bit
accesses when the tensors are contiguous there and aligned), and the
tokens of one head are consecutive rows, so a tile streams through runs of
the cache; keys and values are written by the same program
(`reshape_and_cache.write_rows`, which copies bit patterns).

The past lengths are checked before the launch (one reduction and one
transfer to the host; a scan for the first bad one only runs for the
message): a length that leaves no room raises `ValueError` and nothing is
written. Sources that overlap a cache are copied first.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.kv_caching_infinilm import KvCachingInfinilm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.ops.reshape_and_cache import (
    SourceGuard,
    row_tile,
    write_rows,
)
from infini.ops.runtime.triton import Kernel, next_power_of_two, require_device


@triton.jit
def kv_caching_kernel(
    k_cache,
    v_cache,
    k,
    v,
    past_kv_lengths,
    rows,
    heads,
    seq,
    k_head_size,
    v_head_size,
    length_stride,
    k_stride0,
    k_stride1,
    k_stride2,
    k_step,
    v_stride0,
    v_stride1,
    v_stride2,
    v_step,
    k_cache_stride0,
    k_cache_stride1,
    k_cache_stride2,
    k_cache_step,
    v_cache_stride0,
    v_cache_stride1,
    v_cache_stride2,
    v_cache_step,
    ROWS: tl.constexpr,
    K_BLOCK: tl.constexpr,
    V_BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    token = row % seq
    head = (row // seq) % heads
    batch = row // (seq * heads)
    past = tl.load(past_kv_lengths + batch * length_stride, mask=row_mask, other=0)
    position = past.to(tl.int64) + token
    k_column = tl.arange(0, K_BLOCK)
    write_rows(
        k_cache,
        k,
        k_cache,  # the scale, unread without fp8
        batch * k_stride0 + head * k_stride1 + token * k_stride2,
        batch * k_cache_stride0 + head * k_cache_stride1 + position * k_cache_stride2,
        row_mask,
        k_column * k_step,
        k_column * k_cache_step,
        k_column < k_head_size,
        False,
        0,
        0,
        0,
    )
    v_column = tl.arange(0, V_BLOCK)
    write_rows(
        v_cache,
        v,
        v_cache,  # the scale, unread without fp8
        batch * v_stride0 + head * v_stride1 + token * v_stride2,
        batch * v_cache_stride0 + head * v_cache_stride1 + position * v_cache_stride2,
        row_mask,
        v_column * v_step,
        v_column * v_cache_step,
        v_column < v_head_size,
        False,
        0,
        0,
        0,
    )


KERNEL = Kernel(kv_caching_kernel)


@implementation(
    operator="kv_caching_infinilm",
    devices="cuda_like",
    slot=0,
)
class CudaKvCachingInfinilm(KvCachingInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        k, v, lengths = args.k, args.v, args.past_kv_lengths
        k_cache, v_cache = args.k_cache, args.v_cache
        batch, heads, seq, k_head_size = k.shape
        v_head_size = v.shape[3]
        rows = batch * heads * seq
        k_block = max(next_power_of_two(k_head_size), 16)
        v_block = max(next_power_of_two(v_head_size), 16)
        tile = row_tile(rows, max(k_block, v_block))
        self.batch = batch
        self.rows = rows
        self._launch = KERNEL.bind(
            grid=(-(-rows // tile),),
            arguments=(
                k_cache,
                v_cache,
                k,
                v,
                lengths,
                rows,
                heads,
                seq,
                k_head_size,
                v_head_size,
                lengths.strides[0],
                *k.strides,
                *v.strides,
                *k_cache.strides,
                *v_cache.strides,
            ),
            constexprs={"ROWS": tile, "K_BLOCK": k_block, "V_BLOCK": v_block},
            device=self.device,
        )
        self.sources = SourceGuard((k_cache, v_cache), (k, v, lengths))

    def check_lengths(self, past_kv_lengths) -> None:
        """Raises `length_error` for the first past length outside ``[0,
        max_len - seq]``; one reduction and one transfer when all fit."""
        import torch

        limit = self.max_length - self.seq
        low, high = torch.stack(torch.aminmax(past_kv_lengths)).tolist()
        if low >= 0 and high <= limit:
            return
        bad = (past_kv_lengths < 0) | (past_kv_lengths > limit)
        position = int(bad.nonzero()[0, 0])
        raise self.length_error(position, int(past_kv_lengths[position]))

    def launch(self, stream, k, v, past_kv_lengths, k_cache, v_cache) -> None:
        if self.batch * self.seq == 0:
            # Nothing is written, and the lengths are not read (as on the CPU).
            return
        with stream_context(self.device, stream):
            self.check_lengths(past_kv_lengths)
        if self.rows == 0:
            return
        k, v, past_kv_lengths = self.sources(
            self.device, stream, (k_cache, v_cache), (k, v, past_kv_lengths)
        )
        self._launch(stream, k_cache, v_cache, k, v, past_kv_lengths)
