"""CUDA-like `paged_attention_prefill_infinilm` (slot 0) in Triton: causal
prefill attention over InfiniLM's paged KV cache, FlashAttention-2 style.

Tiling. A program owns a tile of ``BLOCK_M`` rows, each row one (query
token, query head) pair: `TOKENS` consecutive query tokens of one sequence
by `HEADS` query heads that share one kv head (``HEADS`` divides ``group =
heads / kv_heads``; usually it is the whole group, so the keys and values
of a kv head are read once for all its query heads). The grid is (query
tiles, head blocks). Sequence `s` owns the query tiles from
``cum_seq_lens_q[s] // TOKENS + s`` on (at least as many as its
``ceil(queries / TOKENS)`` tiles need; the grid has ``tokens // TOKENS +
seqs`` of them), and a program finds its sequence by a binary search of
those starts; a tile past its sequence's queries does nothing.

The program walks the sequence's cache in blocks of ``BLOCK_N`` tokens,
gathering each token's key and value rows in place through `block_tables`
(`attention.cache_slots`), with `tl.dot` for ``Q K^T`` and ``P V`` (tensor
cores for float16 and bfloat16, the probabilities rounded to the cache's
dtype for the second product as FlashAttention does; float32 stays in IEEE
float32) and an online softmax in float32 in base 2 (the scale folded with
``log2(e)``). Causality is bottom-right aligned: query token `i` of a
sequence with `m` new tokens and total length `n` sits at position ``p = n
- m + i`` and sees keys ``j <= p``. Key blocks below every row's position
need no mask and run in a first loop; the blocks up to the tile's last
position run masked in a second. ALiBi adds ``slope[h] * (j - p)``. With a
sliding `window` ``W`` a row sees ``p - W < j <= p``: every block from the
one holding the tile's first visible key runs masked.

The index tensors are checked before the launch (`attention.check_paged_indices`):
a bad value raises `ValueError` and nothing is written. `out` may be `q`
itself; other overlaps go through a staging buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.paged_attention_prefill_infinilm import (
    PagedAttentionPrefillInfinilm,
)
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.attention import (
    cache_slots,
    check_paged_indices,
    launch_or_stage,
)
from infini.ops.native.cuda.elementwise import (
    from_bfloat16,
    load_or_zero,
    round_as,
    store_as,
)
from infini.ops.native.cuda.special import LOG2E
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    Pointer,
    next_power_of_two,
    require_device,
)


@triton.jit
def attend_block(
    query,
    maximum,
    total,
    acc,
    start,
    kv_end,
    position,
    window,
    slope,
    table_row,
    table_step,
    k_head,
    v_head,
    block_size,
    qk_scale,
    k_stride0,
    k_stride2,
    k_step,
    v_stride0,
    v_stride2,
    v_step,
    feature,
    feature_mask,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """One block of keys from `start`: the online softmax update of the
    running row maxima, sums and accumulator (`MASKED`: keys at or past
    `kv_end`, or after a row's `position`, are left out, and with
    `HAS_WINDOW` those at or before ``position - window``). The loads and
    conversions are spelled out here rather than through the helpers of
    `elementwise.py`: the interpreter pays for every nested call."""
    token = start + tl.arange(0, BLOCK_N)
    token_mask = token < kv_end
    block, offset = cache_slots(table_row, table_step, token, token_mask, block_size)
    mask = token_mask[:, None] & feature_mask[None, :]
    k_rows = block * k_stride0 + offset * k_stride2
    v_rows = block * v_stride0 + offset * v_stride2
    keys = tl.load(
        k_head + k_rows[:, None] + feature[None, :] * k_step, mask=mask, other=0.0
    )
    if UPCAST:
        if keys.dtype == tl.bfloat16:
            keys = from_bfloat16(keys)
        keys = keys.to(tl.float32)
    scores = tl.dot(query, tl.trans(keys), input_precision=PRECISION) * qk_scale
    if HAS_ALIBI:
        distance = (token[None, :] - position[:, None]).to(tl.float32)
        scores += slope[:, None] * distance
    if MASKED:
        # A query row's position is below `kv_end`, so this also leaves out
        # the keys past it (which were read as zeros).
        visible = token[None, :] <= position[:, None]
        if HAS_WINDOW:
            visible &= token[None, :] > (position - window)[:, None]
        scores = tl.where(visible, scores, -float("inf"))
    block_maximum = tl.maximum(maximum, tl.max(scores, axis=1))
    # Rows that have seen no key yet keep -inf; subtracting 0 instead keeps
    # `exp2` away from `-inf - -inf`.
    shift = tl.where(block_maximum == -float("inf"), 0.0, block_maximum)
    rescale = tl.exp2(maximum - shift)
    weights = tl.exp2(scores - shift[:, None])
    total = total * rescale + tl.sum(weights, axis=1)
    values = tl.load(
        v_head + v_rows[:, None] + feature[None, :] * v_step, mask=mask, other=0.0
    )
    # The second product takes the weights in the cache's dtype (bfloat16
    # ones rounded, then held in float32, when `UPCAST`).
    if UPCAST:
        if values.dtype == tl.bfloat16:
            values = from_bfloat16(values)
            weights = round_as(weights, v_head)
        values = values.to(tl.float32)
    else:
        weights = weights.to(values.dtype)
    acc = acc * rescale[:, None]
    acc = tl.dot(weights, values, acc, input_precision=PRECISION)
    return block_maximum, total, acc


@triton.jit
def paged_attention_prefill_kernel(
    out,
    q,
    k_cache,
    v_cache,
    block_tables,
    seq_lens,
    cum_seq_lens_q,
    slopes,
    seqs,
    group,
    head_size,
    block_size,
    qk_scale,
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
    cum_stride,
    slope_stride,
    window,
    TOKENS: tl.constexpr,
    HEADS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_BLOCK: tl.constexpr,
    SEARCH_STEPS: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
):
    tile = tl.program_id(0).to(tl.int64)
    first_head = tl.program_id(1).to(tl.int64) * HEADS
    kv_head = first_head // group

    # The sequence whose tiles start at or before `tile`: the last `s` with
    # ``cum[s] // TOKENS + s <= tile`` (these starts strictly increase).
    seq = tile * 0
    size = seqs
    for _ in range(SEARCH_STEPS):
        half = size // 2
        middle = seq + half
        begin = tl.load(cum_seq_lens_q + middle * cum_stride).to(tl.int64)
        seq = tl.where(begin // TOKENS + middle <= tile, middle, seq)
        size -= half
    cum_begin = tl.load(cum_seq_lens_q + seq * cum_stride).to(tl.int64)
    cum_end = tl.load(cum_seq_lens_q + (seq + 1) * cum_stride).to(tl.int64)
    length = tl.load(seq_lens + seq * length_stride).to(tl.int64)
    first = cum_begin + (tile - (cum_begin // TOKENS + seq)) * TOKENS
    # Query row `g` of the sequence sits at position ``g + shift``.
    shift = length - cum_end

    row = tl.arange(0, BLOCK_M)
    token = first + row // HEADS
    head = first_head + row % HEADS
    row_mask = (row < TOKENS * HEADS) & (token < cum_end)
    position = token + shift
    feature = tl.arange(0, D_BLOCK)
    feature_mask = feature < head_size
    query_mask = row_mask[:, None] & feature_mask[None, :]
    q_pointers = (
        q + (token * q_stride0 + head * q_stride1)[:, None] + feature[None, :] * q_step
    )
    if UPCAST:
        query = load_or_zero(q_pointers, query_mask, tl.float32)
    else:
        query = tl.load(q_pointers, mask=query_mask, other=0.0)
    if HAS_ALIBI:
        slope = tl.load(slopes + head * slope_stride, mask=row_mask, other=0.0)
        slope = slope * LOG2E
    else:
        slope = tl.zeros([BLOCK_M], dtype=tl.float32)

    # Keys below `full_end` are visible to every row of the tile; the tile's
    # last row sees up to `kv_end`. A tile past its sequence's queries
    # reads nothing.
    has_rows = first < cum_end
    last = tl.minimum(first + TOKENS, cum_end)
    kv_end = tl.where(has_rows, last + shift, 0)
    full_end = tl.where(has_rows, (first + shift + 1) // BLOCK_N * BLOCK_N, 0)
    masked_begin = full_end
    if HAS_WINDOW:
        # Every block is masked (each row's window has two edges), from the
        # block of the first row's first visible key on.
        full_end = 0
        masked_begin = tl.maximum(first + shift + 1 - window, 0) // BLOCK_N * BLOCK_N
        masked_begin = tl.where(has_rows, masked_begin, 0)

    maximum = tl.full([BLOCK_M], -float("inf"), tl.float32)
    total = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_BLOCK], dtype=tl.float32)
    table_row = block_tables + seq * table_stride0
    k_head = k_cache + kv_head * k_stride1
    v_head = v_cache + kv_head * v_stride1
    for start in range(0, full_end, BLOCK_N):
        maximum, total, acc = attend_block(
            query,
            maximum,
            total,
            acc,
            start,
            kv_end,
            position,
            window,
            slope,
            table_row,
            table_stride1,
            k_head,
            v_head,
            block_size,
            qk_scale,
            k_stride0,
            k_stride2,
            k_step,
            v_stride0,
            v_stride2,
            v_step,
            feature,
            feature_mask,
            BLOCK_N,
            False,
            HAS_ALIBI,
            HAS_WINDOW,
            UPCAST,
            PRECISION,
        )
    for start in range(masked_begin, kv_end, BLOCK_N):
        maximum, total, acc = attend_block(
            query,
            maximum,
            total,
            acc,
            start,
            kv_end,
            position,
            window,
            slope,
            table_row,
            table_stride1,
            k_head,
            v_head,
            block_size,
            qk_scale,
            k_stride0,
            k_stride2,
            k_step,
            v_stride0,
            v_stride2,
            v_step,
            feature,
            feature_mask,
            BLOCK_N,
            True,
            HAS_ALIBI,
            HAS_WINDOW,
            UPCAST,
            PRECISION,
        )
    inverse = tl.where(total > 0.0, 1.0 / total, 0.0)
    store_as(
        out
        + (token * out_stride0 + head * out_stride1)[:, None]
        + feature[None, :] * out_step,
        acc * inverse[:, None],
        query_mask,
    )


KERNEL = Kernel(paged_attention_prefill_kernel)

# `(largest padded head size, (rows, keys, warps, stages))`: the tile of a
# program. 16-bit data: FlashAttention-2's 128 x 64 tiles on two warp
# groups for head sizes up to 128, 64 x 32 beyond (wider accumulators).
# float32 runs IEEE products without tensor cores, whose operands hold
# whole rows per thread, so its tiles are small. Each was checked free of
# register spills for sm_90 (`python -m tests.sm90`). The interpreter runs
# each block as NumPy steps: fewer, bigger programs.
INTERPRETER_TILE = (128, 64, 4, 1)
FLOAT16_TILES = ((128, (128, 64, 8, 3)), (1 << 30, (64, 32, 8, 2)))
FLOAT32_TILES = (
    (128, (32, 16, 8, 2)),
    (256, (16, 16, 4, 2)),
    (1 << 30, (16, 16, 8, 2)),
)


def tile_shape(dtype: str, features: int, group: int, rows_wanted: int):
    """`(BLOCK_M, BLOCK_N, HEADS, num_warps, num_stages)` for a head size
    padded to `features`, `group` query heads per kv head and about
    `rows_wanted` rows of work per sequence."""
    if INTERPRETER:
        rows_limit, keys, warps, stages = INTERPRETER_TILE
    else:
        tiles = FLOAT32_TILES if dtype == "float32" else FLOAT16_TILES
        rows_limit, keys, warps, stages = next(
            tile for limit, tile in tiles if features <= limit
        )
    # Heads per tile: the largest divisor of `group` whose padded count fits.
    heads = max(
        d
        for d in range(1, group + 1)
        if group % d == 0 and next_power_of_two(d) <= rows_limit
    )
    rows = min(rows_limit, max(16, next_power_of_two(rows_wanted)))
    rows = max(rows, next_power_of_two(heads))
    if rows < 64 and dtype != "float32" and not INTERPRETER:
        # Short tiles (few query rows per sequence) fill one warp group.
        warps = 4
    return rows, keys, heads, warps, stages


@implementation(
    operator="paged_attention_prefill_infinilm",
    devices="cuda_like",
    slot=0,
)
class CudaPagedAttentionPrefillInfinilm(PagedAttentionPrefillInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        q, k_cache, v_cache, out = args.q, args.k_cache, args.v_cache, args.out
        tables, lengths, cum = args.block_tables, args.seq_lens, args.cum_seq_lens_q
        slopes = args.alibi_slopes
        group = self.heads // self.kv_heads
        features = max(next_power_of_two(self.head_size), 16)
        average = -(-self.tokens // max(self.seqs, 1))
        block_m, block_n, heads, warps, stages = tile_shape(
            q.dtype, features, group, average * group
        )
        tokens_per_tile = block_m // heads
        # float32 data (and bfloat16 under the interpreter, whose products
        # of bfloat16 are wrong) go through float32 products; float16 runs
        # the GPUs' code there too.
        upcast = q.dtype == "float32" or (INTERPRETER and q.dtype == "bfloat16")
        self.empty = self.tokens == 0 or self.heads == 0 or self.seqs == 0
        self._launch = KERNEL.bind(
            grid=(
                0 if self.empty else self.tokens // tokens_per_tile + self.seqs,
                self.heads // heads,
            ),
            arguments=(
                out,
                q,
                k_cache,
                v_cache,
                tables,
                lengths,
                cum,
                slopes if slopes is not None else Pointer("float32"),
                self.seqs,
                group,
                self.head_size,
                self.block_size,
                self.scale * LOG2E.value,
                *q.strides,
                *out.strides,
                *k_cache.strides,
                *v_cache.strides,
                *tables.strides,
                lengths.strides[0],
                cum.strides[0],
                slopes.strides[0] if slopes is not None else 0,
                self.window,
            ),
            constexprs={
                "TOKENS": tokens_per_tile,
                "HEADS": heads,
                "BLOCK_M": block_m,
                "BLOCK_N": block_n,
                "D_BLOCK": features,
                "SEARCH_STEPS": max(self.seqs - 1, 0).bit_length(),
                "HAS_ALIBI": slopes is not None,
                "HAS_WINDOW": self.window > 0,
                "UPCAST": upcast,
                "PRECISION": "ieee" if upcast else "tf32",
            },
            device=self.device,
            num_warps=warps,
            num_stages=stages,
        )
        self.overlap = OverlapGuard(out, (q, k_cache, v_cache))

    def launch(
        self,
        stream,
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        cum_seq_lens_q,
        alibi_slopes,
        out,
    ) -> None:
        with stream_context(self.device, stream):
            check_paged_indices(self, block_tables, seq_lens, cum_seq_lens_q)
        if self.empty:
            return
        slopes = alibi_slopes if alibi_slopes is not None else q
        tensors = (q, k_cache, v_cache, block_tables, seq_lens, cum_seq_lens_q, slopes)
        launch_or_stage(self, self._launch, stream, out, (q, k_cache, v_cache), tensors)
