"""CUDA-like `paged_attention_infinilm` (slot 0) in Triton: decode attention
over a paged KV cache.

One program per (sequence, kv head) walks the sequence's cached tokens in
chunks of `KV_BLOCK`, gathering each token's key and value rows through the
block table once for the query heads that share the kv head (heads ``g *
group`` to ``(g + 1) * group - 1``, ``group = heads / kv_heads``), with an
online softmax in float32: the running maximum, the running sum and
the float32 accumulator are rescaled per chunk, and the row is divided and
rounded once at the end. A sequence of length 0 gives zeros. With a sliding
`window` the walk starts at the window's first token.

The cache layout, the index check and the overlap handling are shared with
the prefill kernel (`native/cuda/attention.py`): `block_tables` and
`seq_lens` are checked before the launch (`check_paged_indices`, reductions
on the device and one transfer): a bad value raises `ValueError` and nothing
is written. `out` may be `q` itself (a program reads its query row before it
writes the same row); any other overlap with an input is computed into a
staging buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.paged_attention_infinilm import PagedAttentionInfinilm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.attention import (
    cache_slots,
    check_paged_indices,
    launch_or_stage,
)
from infini.ops.native.cuda.elementwise import load_or_zero, store_as
from infini.ops.native.cuda.special import exp_float32
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    Pointer,
    next_power_of_two,
    require_device,
)

# Elements of a step's (query heads x tokens x features) product: cached
# tokens per step are what fits. The interpreter runs each step as NumPy
# operations, so it takes longer ones.
GPU_KV_ELEMENTS = 8192
INTERPRETER_KV_ELEMENTS = 65536


@triton.jit
def paged_attention_kernel(
    out,
    q,
    k_cache,
    v_cache,
    block_tables,
    seq_lens,
    slopes,
    kv_heads,
    group,
    head_size,
    block_size,
    scale,
    q_stride0,
    q_stride1,
    q_step,
    out_stride0,
    out_stride1,
    out_step,
    k_stride0,
    k_stride1,
    k_stride2,
    k_step,
    v_stride0,
    v_stride1,
    v_stride2,
    v_step,
    table_stride0,
    table_stride1,
    length_stride,
    slope_stride,
    window,
    GROUP: tl.constexpr,
    KV_BLOCK: tl.constexpr,
    D_BLOCK: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
):
    program = tl.program_id(0).to(tl.int64)
    seq = program // kv_heads
    kv_head = program % kv_heads
    # The query heads of this kv head (rows) by the features (columns).
    head = kv_head * group + tl.arange(0, GROUP)
    head_mask = tl.arange(0, GROUP) < group
    feature = tl.arange(0, D_BLOCK)
    feature_mask = feature < head_size
    query_mask = head_mask[:, None] & feature_mask[None, :]
    query = load_or_zero(
        q + seq * q_stride0 + head[:, None] * q_stride1 + feature[None, :] * q_step,
        query_mask,
        tl.float32,
    )
    length = tl.load(seq_lens + seq * length_stride).to(tl.int64)
    if HAS_ALIBI:
        slope = tl.load(slopes + head * slope_stride, mask=head_mask, other=0.0)
    maximum = tl.full([GROUP], -float("inf"), tl.float32)
    total = tl.zeros([GROUP], dtype=tl.float32)
    acc = tl.zeros([GROUP, D_BLOCK], dtype=tl.float32)
    k_head = k_cache + kv_head * k_stride1
    v_head = v_cache + kv_head * v_stride1
    tokens = tl.arange(0, KV_BLOCK)
    # The sliding window's first key (`window` is at least the capacity when
    # there is none): earlier tokens are never read.
    for start in range(tl.maximum(length - window, 0), length, KV_BLOCK):
        token = start + tokens
        token_mask = token < length
        block, offset = cache_slots(
            block_tables + seq * table_stride0,
            table_stride1,
            token,
            token_mask,
            block_size,
        )
        mask = token_mask[:, None] & feature_mask[None, :]
        keys = load_or_zero(
            k_head
            + (block * k_stride0 + offset * k_stride2)[:, None]
            + feature[None, :] * k_step,
            mask,
            tl.float32,
        )
        # (query heads, tokens): the dot products over the features.
        scores = tl.sum(query[:, None, :] * keys[None, :, :], axis=2) * scale
        if HAS_ALIBI:
            distance = (token - (length - 1)).to(tl.float32)
            scores += slope[:, None] * distance[None, :]
        scores = tl.where(token_mask[None, :], scores, -float("inf"))
        chunk_maximum = tl.maximum(maximum, tl.max(scores, axis=1))
        rescale = exp_float32(maximum - chunk_maximum)
        weights = exp_float32(scores - chunk_maximum[:, None])
        weights = tl.where(token_mask[None, :], weights, 0.0)
        values = load_or_zero(
            v_head
            + (block * v_stride0 + offset * v_stride2)[:, None]
            + feature[None, :] * v_step,
            mask,
            tl.float32,
        )
        total = total * rescale + tl.sum(weights, axis=1)
        update = tl.sum(weights[:, :, None] * values[None, :, :], axis=1)
        acc = acc * rescale[:, None] + update
        maximum = chunk_maximum
    inverse = tl.where(total > 0.0, 1.0 / total, 0.0)
    store_as(
        out
        + seq * out_stride0
        + head[:, None] * out_stride1
        + feature[None, :] * out_step,
        acc * inverse[:, None],
        query_mask,
    )


KERNEL = Kernel(paged_attention_kernel)


@implementation(
    operator="paged_attention_infinilm",
    devices="cuda_like",
    slot=0,
)
class CudaPagedAttentionInfinilm(PagedAttentionInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        q, k_cache, v_cache, out = args.q, args.k_cache, args.v_cache, args.out
        tables, lengths, slopes = args.block_tables, args.seq_lens, args.alibi_slopes
        group = self.heads // self.kv_heads
        group_block = next_power_of_two(group)
        features = max(next_power_of_two(self.head_size), 16)
        limit = INTERPRETER_KV_ELEMENTS if INTERPRETER else GPU_KV_ELEMENTS
        capacity = next_power_of_two(max(self.max_blocks * self.block_size, 1))
        kv_block = max(1, min(limit // (group_block * features), capacity, 256))
        self.has_alibi = slopes is not None
        self._launch = KERNEL.bind(
            grid=(self.seqs * self.kv_heads,),
            arguments=(
                out,
                q,
                k_cache,
                v_cache,
                tables,
                lengths,
                slopes if slopes is not None else Pointer("float32"),
                self.kv_heads,
                group,
                self.head_size,
                self.block_size,
                self.scale,
                *q.strides,
                *out.strides,
                *k_cache.strides,
                *v_cache.strides,
                *tables.strides,
                lengths.strides[0],
                slopes.strides[0] if slopes is not None else 0,
                # No window: one at least as long as any sequence.
                self.window or max(self.max_blocks * self.block_size, 1),
            ),
            constexprs={
                "GROUP": group_block,
                "KV_BLOCK": kv_block,
                "D_BLOCK": features,
                "HAS_ALIBI": self.has_alibi,
            },
            device=self.device,
        )
        self.overlap = OverlapGuard(out, (q, k_cache, v_cache))

    def launch(
        self, stream, q, k_cache, v_cache, block_tables, seq_lens, alibi_slopes, out
    ) -> None:
        if self.seqs == 0 or self.heads == 0:
            return
        with stream_context(self.device, stream):
            check_paged_indices(self, block_tables, seq_lens)
        slopes = alibi_slopes if alibi_slopes is not None else q
        tensors = (q, k_cache, v_cache, block_tables, seq_lens, slopes)
        launch_or_stage(self, self._launch, stream, out, (q, k_cache, v_cache), tensors)
