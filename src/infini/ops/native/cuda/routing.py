"""Mixture-of-experts routing pieces shared by the CUDA-like Triton kernels.

Top-k selection (`topk_softmax`, `topk_sigmoid`, `topksoftmax_infinilm`,
`grouped_topk`): a score and its expert are packed into one int64 *order
key*, ``(order(score) << 32) | (2^31 - 1 - expert)``, where `order` maps a
float32 to an int32 with the same order (NaN above every number, -0 equal
to +0). One `tl.max` over a row of keys then gives torch's first top-k
choice: the best score and, among equal scores, the lower expert id.
Removing the winner's key and repeating gives the next one. The score is
recovered from the key (`key_score`), so a row without a bias needs one
reduction per pick.

`TopkGatingLaunch` plans the gating kernel of those three operators: a tile
of ``ROWS x BLOCK`` (tokens x experts) per program, the whole row of
experts in registers, the outputs written once per row from
``ROWS x BLOCK_K`` register tiles.

Stable counting sort by expert (`moe_align_block_size`,
`get_cutlass_moe_mm_data`): the entries of `topk_ids` (row-major order) are
cut into chunks of `CHUNK` entries and the experts into blocks of
`EXPERT_BLOCK`, and every launch runs one program per (chunk, expert
block):

1. `expert_count_kernel` counts each expert's entries in each chunk by
   comparing the chunk with the block's experts (a ``CHUNK x EXPERT_BLOCK``
   one-hot tile) into a ``chunks x experts`` int32 table;
2. with many chunks, `expert_scan_kernel` (one program per expert block)
   turns each column of that table into its exclusive prefix over chunks
   and writes each expert's total; with few, the placing kernel sums the
   table itself (`chunk_prefix_and_totals`, ``SCANNED`` false);
3. the operator's placing kernel gives entry ``i`` of expert ``e`` the place
   ``start(e) + prefix(chunk, e) + rank in the chunk`` (an exclusive
   `tl.cumsum` of the one-hot tile down the chunk): entries keep their order
   within an expert, and every run gives the same result (no atomics).

`ExpertSortPlan` picks the tiles from the geometry and binds the two shared
kernels; the scratch tables are allocated on the caller's stream per call.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.core.geometry import coalesce
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as, store_as
from infini.ops.native.cuda.special import exp, sigmoid
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    Pointer,
    next_power_of_two,
    staging_like,
)

# Elements (tokens x experts) a gating program covers: several tokens share
# one when experts are few. The interpreter runs a program as NumPy steps,
# so it takes larger tiles.
GPU_TILE = 2048
INTERPRETER_TILE = 1 << 17

# The smallest int64, below every order key: masked and removed experts.
NO_KEY = tl.constexpr(-(2**63))


@triton.jit
def order_key(score, expert):
    """The int64 key whose maximum is torch's first top-k choice."""
    score = tl.where(score == 0.0, 0.0, score)
    bits = score.to(tl.int32, bitcast=True)
    order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    order = tl.where(score != score, 0x7FFFFFFF, order)
    return (order.to(tl.int64) << 32) | (0x7FFFFFFF - expert).to(tl.int64)


@triton.jit
def key_expert(key):
    """The expert of an order key (int64)."""
    return 0x7FFFFFFF - (key & 0x7FFFFFFF)


@triton.jit
def key_score(key):
    """The float32 score of an order key (-0 comes back as +0, NaN as a
    quiet NaN)."""
    order = (key >> 32).to(tl.int32)
    bits = tl.where(order >= 0, order, order ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def topk_gating_kernel(
    weights,
    ids,
    token_ids,
    gating,
    bias,
    padding,
    tokens,
    experts,
    topk,
    gating_stride0,
    gating_stride1,
    bias_stride,
    padding_stride,
    weights_stride0,
    weights_stride1,
    ids_stride0,
    ids_stride1,
    token_ids_stride0,
    token_ids_stride1,
    scale,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SOFTMAX: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_PADDING: tl.constexpr,
    HAS_TOKEN_IDS: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < tokens
    expert = tl.arange(0, BLOCK)[None, :]
    valid = row_mask[:, None] & (expert < experts)
    x = load_as(
        gating + row[:, None] * gating_stride0 + expert * gating_stride1,
        valid,
        tl.float32,
    )
    if SOFTMAX:
        x = tl.where(valid, x, -float("inf"))
        maximum = tl.max(x, axis=1)[:, None]
        e = tl.where(valid, exp(x - maximum), 0.0)
        scores = e * (1.0 / tl.sum(e, axis=1)[:, None])
    else:
        scores = sigmoid(x)
    choice = scores
    if HAS_BIAS:
        b = load_as(bias + expert * bias_stride, expert < experts, tl.float32)
        choice = scores + b
    keys = tl.where(valid, order_key(choice, expert), NO_KEY)
    slot = tl.arange(0, BLOCK_K)[None, :]
    chosen_weights = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    chosen_ids = tl.zeros([ROWS, BLOCK_K], dtype=tl.int64)
    total = tl.zeros([ROWS], dtype=tl.float32)
    for j in range(0, topk):
        best = tl.max(keys, axis=1)
        best_expert = key_expert(best)[:, None]
        hit = expert == best_expert
        if HAS_BIAS:
            # The weight is the unbiased score: one more reduction.
            score = tl.sum(tl.where(hit, scores, 0.0), axis=1)
        else:
            score = key_score(best)
        keys = tl.where(hit, NO_KEY, keys)
        total += score
        chosen_weights = tl.where(slot == j, score[:, None], chosen_weights)
        chosen_ids = tl.where(slot == j, best_expert, chosen_ids)
    multiplier = tl.full([ROWS], scale, tl.float32)
    if RENORMALIZE:
        multiplier = tl.where(total != 0.0, scale / total, multiplier)
    chosen_weights = chosen_weights * multiplier[:, None]
    if HAS_PADDING:
        flag = tl.load(padding + row * padding_stride, mask=row_mask, other=0)
        padded = (flag != 0)[:, None]
        chosen_weights = tl.where(padded, 0.0, chosen_weights)
        chosen_ids = tl.where(padded, -1, chosen_ids)
    out_mask = row_mask[:, None] & (slot < topk)
    store_as(
        weights + row[:, None] * weights_stride0 + slot * weights_stride1,
        chosen_weights,
        out_mask,
    )
    tl.store(
        ids + row[:, None] * ids_stride0 + slot * ids_stride1,
        chosen_ids.to(ids.dtype.element_ty),
        mask=out_mask,
    )
    if HAS_TOKEN_IDS:
        tl.store(
            token_ids + row[:, None] * token_ids_stride0 + slot * token_ids_stride1,
            (slot.to(tl.int64) * tokens + row[:, None]).to(token_ids.dtype.element_ty),
            mask=out_mask,
        )


GATING_KERNEL = Kernel(topk_gating_kernel)


def row_tile(width: int, rows: int) -> tuple[int, int]:
    """`(ROWS, BLOCK)`: rows per program and the power-of-two block holding
    a row of `width` elements."""
    block = max(next_power_of_two(width), 16)
    tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
    return max(1, min(tile // block, next_power_of_two(max(rows, 1)))), block


def row_warps(block: int) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


class OutputStaging:
    """Outputs that overlap an input other than element for element are
    computed into staging buffers (results as if every input were read
    first); `None` entries (absent optional tensors) are skipped."""

    def __init__(self, outputs, inputs) -> None:
        present = tuple(meta for meta in inputs if meta is not None)
        self.guards = tuple(
            None if meta is None else OverlapGuard(meta, present) for meta in outputs
        )

    def targets(self, outputs, inputs) -> list | None:
        """The tensors to write, or `None` when every output is written in
        place."""
        present = tuple(tensor for tensor in inputs if tensor is not None)
        staged = [
            guard is not None and guard(out, present)
            for guard, out in zip(self.guards, outputs)
        ]
        if not any(staged):
            return None
        return [
            staging_like(out) if stage else out for out, stage in zip(outputs, staged)
        ]

    @staticmethod
    def finish(targets, outputs) -> None:
        for target, out in zip(targets, outputs):
            if target is not out:
                out.copy_(target)


class TopkGatingLaunch:
    """Plans (`plan`) and runs (`run`) the gating kernel; mixed into the
    implementations, whose base validates the arguments first. `outputs` is
    ``(weights, ids, token_ids)``, `token_ids` `None` when the operator has
    none; `softmax` picks the softmax over the sigmoid."""

    def plan(
        self,
        softmax: bool,
        gating,
        bias,
        padding,
        outputs,
        renormalize: bool,
        scale: float,
    ) -> None:
        tokens, experts = gating.shape
        weights, ids, token_ids = outputs
        topk = weights.shape[1]
        rows, block = row_tile(experts, tokens)
        self.gating_empty = tokens == 0 or topk == 0
        placeholder = Pointer(gating.dtype)
        self._gating = GATING_KERNEL.bind(
            grid=(-(-tokens // rows),),
            arguments=(
                weights,
                ids,
                token_ids if token_ids is not None else Pointer(ids.dtype),
                gating,
                bias if bias is not None else placeholder,
                padding if padding is not None else placeholder,
                tokens,
                experts,
                topk,
                *gating.strides,
                bias.strides[0] if bias is not None else 0,
                padding.strides[0] if padding is not None else 0,
                *weights.strides,
                *ids.strides,
                *(token_ids.strides if token_ids is not None else (0, 0)),
                float(scale),
            ),
            constexprs={
                "ROWS": rows,
                "BLOCK": block,
                "BLOCK_K": next_power_of_two(topk),
                "SOFTMAX": softmax,
                "HAS_BIAS": bias is not None,
                "HAS_PADDING": padding is not None,
                "HAS_TOKEN_IDS": token_ids is not None,
                "RENORMALIZE": renormalize,
            },
            device=self.device,
            num_warps=row_warps(block),
        )
        self.gating_staging = OutputStaging(outputs, (gating, bias, padding))

    def run(self, stream, gating, bias, padding, weights, ids, token_ids) -> None:
        if self.gating_empty:
            return
        inputs = (gating, bias, padding)
        outputs = (weights, ids, token_ids)
        # Absent optional pointers get any tensor: the kernel never reads them.
        bias = gating if bias is None else bias
        padding = gating if padding is None else padding
        targets = self.gating_staging.targets(outputs, inputs)
        if targets is None:
            token_ids = ids if token_ids is None else token_ids
            self._gating(stream, weights, ids, token_ids, gating, bias, padding)
            return
        with stream_context(self.device, stream):
            staged_weights, staged_ids, staged_token_ids = targets
            if staged_token_ids is None:
                staged_token_ids = staged_ids
            self._gating(
                stream,
                staged_weights,
                staged_ids,
                staged_token_ids,
                gating,
                bias,
                padding,
            )
            OutputStaging.finish(
                [t for t in targets if t is not None],
                [out for out in outputs if out is not None],
            )


# -- stable counting sort by expert ---------------------------------------------

# One-hot tiles (entries x experts) of the counting kernels, and the most
# experts one program compares an entry with: on GPUs, 512-entry chunks
# against 8 experts, so that a long `topk_ids` makes few chunks (the scan
# walks them) and many programs. The interpreter runs a program as NumPy
# steps at a high fixed cost per step: one program (all experts, large
# chunks) does the work of many on a GPU.
GPU_SORT_TILE = 4096
GPU_EXPERT_BLOCK_LIMIT = 8
INTERPRETER_SORT_TILE = 1 << 20
INTERPRETER_EXPERT_BLOCK_LIMIT = 1024
# The placing kernels sum the count table themselves (no scan launch) while
# it has at most this many elements (chunks x experts, padded).
DIRECT_TABLE_LIMIT = 4096
# Elements (chunks x experts) of a scan step.
SCAN_TILE = 4096


@triton.jit
def entry_experts(
    ids,
    entry,
    mask,
    ids_columns,
    ids_stride0,
    ids_stride1,
    expert_map,
    map_size,
    map_stride,
    experts,
    HAS_MAP: tl.constexpr,
):
    """The expert (int32) of each entry (a row-major index into `ids` viewed
    as ``(-1, ids_columns)``), mapped through `expert_map` when there is
    one; -1 for masked entries and ids outside ``[0, experts)`` (or outside
    the map)."""
    offset = (entry // ids_columns) * ids_stride0 + (entry % ids_columns) * ids_stride1
    expert = tl.load(ids + offset, mask=mask, other=-1).to(tl.int64)
    if HAS_MAP:
        inside = mask & (expert >= 0) & (expert < map_size)
        mapped = tl.load(expert_map + expert * map_stride, mask=inside, other=-1)
        expert = tl.where(inside, mapped.to(tl.int64), -1)
    return tl.where((expert >= 0) & (expert < experts), expert, -1).to(tl.int32)


@triton.jit
def expert_count_kernel(
    counts,
    ids,
    expert_map,
    entries,
    ids_columns,
    ids_stride0,
    ids_stride1,
    map_size,
    map_stride,
    experts,
    table_width,
    CHUNK: tl.constexpr,
    EXPERT_BLOCK: tl.constexpr,
    HAS_MAP: tl.constexpr,
):
    """``counts[chunk, e]``: the entries of chunk `chunk` routed to `e`."""
    chunk = tl.program_id(0).to(tl.int64)
    expert = tl.program_id(1) * EXPERT_BLOCK + tl.arange(0, EXPERT_BLOCK)
    entry = chunk * CHUNK + tl.arange(0, CHUNK)
    routed = entry_experts(
        ids,
        entry,
        entry < entries,
        ids_columns,
        ids_stride0,
        ids_stride1,
        expert_map,
        map_size,
        map_stride,
        experts,
        HAS_MAP,
    )
    hits = (routed[:, None] == expert[None, :]).to(tl.int32)
    tl.store(counts + chunk * table_width + expert, tl.sum(hits, axis=0))


@triton.jit
def expert_scan_kernel(
    counts,
    totals,
    chunks,
    table_width,
    SCAN_BLOCK: tl.constexpr,
    EXPERT_BLOCK: tl.constexpr,
):
    """Each column of `counts` in place becomes its exclusive prefix sum over
    chunks; `totals[e]` gets the column's sum."""
    expert = tl.program_id(0) * EXPERT_BLOCK + tl.arange(0, EXPERT_BLOCK)
    running = tl.zeros([EXPERT_BLOCK], dtype=tl.int32)
    for start in range(0, chunks, SCAN_BLOCK):
        chunk = start + tl.arange(0, SCAN_BLOCK)
        mask = (chunk < chunks)[:, None]
        pointer = counts + chunk.to(tl.int64)[:, None] * table_width + expert[None, :]
        tile = tl.load(pointer, mask=mask, other=0)
        tl.store(pointer, tl.cumsum(tile, axis=0) - tile + running[None, :], mask=mask)
        running += tl.sum(tile, axis=0)
    tl.store(totals + expert, running)


@triton.jit
def chunk_prefix_and_totals(
    counts,
    totals,
    chunk,
    chunks,
    table_width,
    expert,
    ALL_EXPERTS: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    SCANNED: tl.constexpr,
):
    """`(prefix, total)`: for the experts `expert`, the entries in chunks
    before `chunk`; for every expert (``ALL_EXPERTS`` lanes, zeros past the
    table), the total. From the scanned table, or summed from the counts."""
    every = tl.arange(0, ALL_EXPERTS)
    if SCANNED:
        prefix = tl.load(counts + chunk * table_width + expert)
        total = tl.load(totals + every, mask=every < table_width, other=0)
    else:
        row = tl.arange(0, CHUNKS_BLOCK)[:, None]
        table = tl.load(
            counts + row * table_width + every[None, :],
            mask=(row < chunks) & (every[None, :] < table_width),
            other=0,
        )
        total = tl.sum(table, axis=0)
        earlier = tl.load(
            counts + row * table_width + expert[None, :], mask=row < chunk, other=0
        )
        prefix = tl.sum(earlier, axis=0)
    return prefix, total


@triton.jit
def chunk_places(routed, expert, base):
    """`(place, mine)` of each entry of a chunk whose experts are `routed`:
    for entries routed to one of the experts `expert`, ``base`` of that
    expert plus the entry's rank among the chunk's entries of it."""
    hit = routed[:, None] == expert[None, :]
    hits = hit.to(tl.int32)
    rank = tl.cumsum(hits, axis=0) - hits
    place = tl.sum(tl.where(hit, base[None, :] + rank, 0), axis=1)
    return place, tl.max(hits, axis=1) > 0


class ExpertSortPlan:
    """The tiles and the two shared launches of a counting sort of
    `entries` entries of `topk_ids` over `experts` experts. `ids` and the
    optional `expert_map` are `TensorMeta`s; `ids_view` is ``(columns,
    stride0, stride1)``, the ids as a ``(-1, columns)`` matrix."""

    def __init__(
        self, device, ids, ids_view, expert_map, entries: int, experts: int
    ) -> None:
        all_experts = next_power_of_two(experts)
        if INTERPRETER:
            tile, limit = INTERPRETER_SORT_TILE, INTERPRETER_EXPERT_BLOCK_LIMIT
        else:
            tile, limit = GPU_SORT_TILE, GPU_EXPERT_BLOCK_LIMIT
        expert_block = min(all_experts, limit)
        capacity = next_power_of_two(max(entries, 1))
        chunk = max(16, min(tile // expert_block, capacity))
        self.chunks = max(1, -(-entries // chunk))
        self.expert_blocks = -(-experts // expert_block)
        self.table_width = self.expert_blocks * expert_block
        self.all_experts = next_power_of_two(self.table_width)
        chunks_block = next_power_of_two(self.chunks)
        self.scanned = chunks_block * self.all_experts > DIRECT_TABLE_LIMIT
        self.constexprs = {
            "CHUNK": chunk,
            "EXPERT_BLOCK": expert_block,
            "ALL_EXPERTS": self.all_experts,
            "CHUNKS_BLOCK": 1 if self.scanned else chunks_block,
            "SCANNED": self.scanned,
        }
        self.grid = (self.chunks, self.expert_blocks)
        self.device = device
        self.has_map = expert_map is not None
        self._count = Kernel(expert_count_kernel).bind(
            grid=self.grid,
            arguments=(
                Pointer("int32"),
                ids,
                expert_map if expert_map is not None else Pointer(ids.dtype),
                entries,
                *ids_view,
                expert_map.shape[0] if expert_map is not None else 0,
                expert_map.strides[0] if expert_map is not None else 0,
                experts,
                self.table_width,
            ),
            constexprs={
                "CHUNK": chunk,
                "EXPERT_BLOCK": expert_block,
                "HAS_MAP": self.has_map,
            },
            device=device,
        )
        self._scan = None
        if self.scanned:
            scan_block = min(max(1, SCAN_TILE // expert_block), chunks_block)
            self._scan = Kernel(expert_scan_kernel).bind(
                grid=(self.expert_blocks,),
                arguments=(
                    Pointer("int32"),
                    Pointer("int32"),
                    self.chunks,
                    self.table_width,
                ),
                constexprs={"SCAN_BLOCK": scan_block, "EXPERT_BLOCK": expert_block},
                device=device,
            )

    def count(self, stream, ids, expert_map):
        """Runs the counting (and scan) launches on `stream`; returns the
        `(counts, totals)` scratch tensors the placing kernel reads. Call
        under `stream_context`."""
        import torch

        counts = torch.empty(
            self.chunks * self.table_width, dtype=torch.int32, device=ids.device
        )
        totals = torch.empty(self.table_width, dtype=torch.int32, device=ids.device)
        expert_map = ids if expert_map is None else expert_map
        self._count(stream, counts, ids, expert_map)
        if self._scan is not None:
            self._scan(stream, counts, totals)
        return counts, totals


def matrix_view(meta) -> tuple[int, int, int] | None:
    """``(columns, stride0, stride1)`` reading `meta`'s elements in
    row-major order as a ``(-1, columns)`` matrix, or `None` when its
    dimensions do not merge into two."""
    shape, (strides,) = coalesce(tuple(meta.shape), [tuple(meta.strides)])
    if len(shape) == 0:
        return (1, 0, 0)
    if len(shape) == 1:
        return (1, strides[0], 0)
    if len(shape) == 2:
        return (shape[1], strides[0], strides[1])
    return None
