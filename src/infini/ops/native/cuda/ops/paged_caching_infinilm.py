"""CUDA-like `paged_caching_infinilm` (slot 0) in Triton: InfiniLM's paged
KV-cache write.

A program writes a tile of ``ROWS`` rows by the head: row ``r`` is head ``r
% kv_heads`` of token ``r // kv_heads``, and the token's slot
(``slot_mapping``) gives its block ``slot // block_size`` and offset ``slot
% block_size``; the row goes to ``cache[block, head, offset, :]``. Rows are
read and written contiguously along the head (128-bit accesses when the
tensors are contiguous there and aligned), keys and values in the same
program (`reshape_and_cache.write_rows`, which copies bit patterns). Tokens
with a negative slot are skipped.

The slots are checked before the launch (one reduction and one transfer to
the host; the base's scan only runs for the message when one is bad): a bad
slot raises `ValueError` and nothing is written. Sources that overlap a
cache are copied first.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.paged_caching_infinilm import PagedCachingInfinilm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.ops.reshape_and_cache import (
    SourceGuard,
    check_slots_fast,
    row_tile,
    write_rows,
)
from infini.ops.runtime.triton import (
    Kernel,
    next_power_of_two,
    require_device,
)


@triton.jit
def paged_caching_kernel(
    k_cache,
    v_cache,
    k,
    v,
    slot_mapping,
    rows,
    heads,
    k_head_size,
    v_head_size,
    block_size,
    slot_stride,
    k_stride0,
    k_stride1,
    k_step,
    v_stride0,
    v_stride1,
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
    in_range = row < rows
    token = row // heads
    head = row % heads
    slot = tl.load(slot_mapping + token * slot_stride, mask=in_range, other=-1)
    slot = slot.to(tl.int64)
    row_mask = in_range & (slot >= 0)
    block = slot // block_size
    offset = slot % block_size
    k_column = tl.arange(0, K_BLOCK)
    write_rows(
        k_cache,
        k,
        k_cache,  # the scale, unread without fp8
        token * k_stride0 + head * k_stride1,
        block * k_cache_stride0 + head * k_cache_stride1 + offset * k_cache_stride2,
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
        token * v_stride0 + head * v_stride1,
        block * v_cache_stride0 + head * v_cache_stride1 + offset * v_cache_stride2,
        row_mask,
        v_column * v_step,
        v_column * v_cache_step,
        v_column < v_head_size,
        False,
        0,
        0,
        0,
    )


KERNEL = Kernel(paged_caching_kernel)


@implementation(
    operator="paged_caching_infinilm",
    devices="cuda_like",
    slot=0,
)
class CudaPagedCachingInfinilm(PagedCachingInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        k, v, slot_mapping = args.k, args.v, args.slot_mapping
        k_cache, v_cache = args.k_cache, args.v_cache
        tokens, heads, k_head_size = k.shape
        v_head_size = v.shape[2]
        rows = tokens * heads
        k_block = max(next_power_of_two(k_head_size), 16)
        v_block = max(next_power_of_two(v_head_size), 16)
        tile = row_tile(rows, max(k_block, v_block))
        self.rows = rows
        self._launch = KERNEL.bind(
            grid=(-(-rows // tile),),
            arguments=(
                k_cache,
                v_cache,
                k,
                v,
                slot_mapping,
                rows,
                heads,
                k_head_size,
                v_head_size,
                self.block_size,
                slot_mapping.strides[0],
                *k.strides,
                *v.strides,
                *k_cache.strides,
                *v_cache.strides,
            ),
            constexprs={"ROWS": tile, "K_BLOCK": k_block, "V_BLOCK": v_block},
            device=self.device,
        )
        self.sources = SourceGuard((k_cache, v_cache), (k, v, slot_mapping))

    def launch(self, stream, k, v, slot_mapping, k_cache, v_cache) -> None:
        if self.rows == 0:
            return
        with stream_context(self.device, stream):
            check_slots_fast(self, slot_mapping)
        k, v, slot_mapping = self.sources(
            self.device, stream, (k_cache, v_cache), (k, v, slot_mapping)
        )
        self._launch(stream, k_cache, v_cache, k, v, slot_mapping)
