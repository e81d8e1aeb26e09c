"""CUDA-like `moe_align_block_size` (slot 0) in Triton: a stable counting
sort of the entries of `topk_ids` by expert, each expert's list padded to a
multiple of `block_size`.

The counting launches are shared with `get_cutlass_moe_mm_data`
(`native/cuda/routing.py`): programs over (chunk of entries, block of
experts) count each expert's entries per chunk, and with many chunks a scan
turns the table into prefixes over chunks. The placing kernel here runs on
the same grid. Each program rebuilds the experts' padded starts from the
totals (an exclusive `tl.cumsum` over every expert, in registers) and
writes, for its chunk and its experts:

- the entries: ``sorted_token_ids[start(e) + prefix(chunk, e) + rank] = i``,
  the rank an exclusive `tl.cumsum` down the chunk's one-hot tile, so
  entries keep their order within an expert as on the CPU;
- in chunk 0, its experts' padding places (``numel``);
- a share of the places past the total (``numel``) and of `experts_ids`
  (each block's expert, found by comparing its first place with the
  experts' ends; 0 past the total), split evenly over all programs;
- program 0: `num_tokens_post_pad`.

Every place is written once, so the programs need no ordering.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.moe_align_block_size import MoeAlignBlockSize
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.routing import (
    ExpertSortPlan,
    OutputStaging,
    chunk_places,
    chunk_prefix_and_totals,
    entry_experts,
    matrix_view,
)
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    require_device,
)

# Places written per step of the tail and padding loops, and the elements
# of a step over `experts_ids` (blocks x experts: each block is compared
# with every expert's end). The interpreter takes large steps (a step costs
# it a fixed overhead).
if INTERPRETER:
    FILL_BLOCK, PAD_BLOCK_LIMIT, BLOCKS_STEP_ELEMENTS = 65536, 4096, 1 << 20
else:
    FILL_BLOCK, PAD_BLOCK_LIMIT, BLOCKS_STEP_ELEMENTS = 1024, 128, 4096


@triton.jit
def moe_align_place_kernel(
    sorted_ids,
    expert_ids,
    total_out,
    ids,
    expert_map,
    counts,
    totals,
    entries,
    ids_columns,
    ids_stride0,
    ids_stride1,
    map_size,
    map_stride,
    experts,
    block_size,
    chunks,
    table_width,
    sorted_length,
    sorted_stride,
    blocks_length,
    expert_ids_stride,
    CHUNK: tl.constexpr,
    EXPERT_BLOCK: tl.constexpr,
    ALL_EXPERTS: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    SCANNED: tl.constexpr,
    HAS_MAP: tl.constexpr,
    PAD_BLOCK: tl.constexpr,
    FILL: tl.constexpr,
    BLOCKS_STEP: tl.constexpr,
):
    chunk = tl.program_id(0).to(tl.int64)
    expert_block = tl.program_id(1)
    program = chunk * tl.num_programs(1) + expert_block
    programs = tl.num_programs(0).to(tl.int64) * tl.num_programs(1)
    expert = expert_block * EXPERT_BLOCK + tl.arange(0, EXPERT_BLOCK)
    every = tl.arange(0, ALL_EXPERTS)
    prefix, total = chunk_prefix_and_totals(
        counts,
        totals,
        chunk,
        chunks,
        table_width,
        expert,
        ALL_EXPERTS,
        CHUNKS_BLOCK,
        SCANNED,
    )
    padded = (total + block_size - 1) // block_size * block_size
    ends = tl.cumsum(padded, axis=0)
    grand_total = tl.sum(padded, axis=0)
    # This program's experts' lanes of the per-expert vectors (where-sums:
    # Triton 3.6 has no register gather).
    before = every[None, :] < expert[:, None]
    own = every[None, :] == expert[:, None]
    start = tl.sum(tl.where(before, padded[None, :], 0), axis=1)
    count = tl.sum(tl.where(own, total[None, :], 0), axis=1)
    own_padded = tl.sum(tl.where(own, padded[None, :], 0), axis=1)
    index_type = sorted_ids.dtype.element_ty

    # The chunk's entries of this program's experts.
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
    place, mine = chunk_places(routed, expert, start + prefix)
    tl.store(
        sorted_ids + place.to(tl.int64) * sorted_stride,
        entry.to(index_type),
        mask=mine,
    )

    # The padding after each of this program's experts' entries.
    if chunk == 0:
        for offset in range(0, block_size, PAD_BLOCK):
            lane = offset + tl.arange(0, PAD_BLOCK)[None, :]
            position = (start + count)[:, None] + lane
            tl.store(
                sorted_ids + position.to(tl.int64) * sorted_stride,
                tl.full([EXPERT_BLOCK, PAD_BLOCK], entries, index_type),
                mask=lane < (own_padded - count)[:, None],
            )

    # This program's share of the places past the total.
    tail = sorted_length - grand_total
    share = (tail + programs - 1) // programs
    first = grand_total + program * share
    last = tl.minimum(first + share, sorted_length)
    for offset in range(first, last, FILL):
        position = offset + tl.arange(0, FILL)
        tl.store(
            sorted_ids + position * sorted_stride,
            tl.full([FILL], entries, index_type),
            mask=position < last,
        )

    # This program's share of `experts_ids`: a block's expert is the number
    # of experts that end at or before its first place.
    share = (blocks_length + programs - 1) // programs
    first = program * share
    last = tl.minimum(first + share, blocks_length)
    for offset in range(first, last, BLOCKS_STEP):
        block = offset + tl.arange(0, BLOCKS_STEP)
        begin = block * block_size
        owner = tl.sum((ends[None, :] <= begin[:, None]).to(tl.int32), axis=1)
        owner = tl.where(begin < grand_total, owner, 0)
        tl.store(
            expert_ids + block * expert_ids_stride,
            owner.to(expert_ids.dtype.element_ty),
            mask=block < last,
        )

    if program == 0:
        tl.store(total_out, grand_total.to(total_out.dtype.element_ty))


KERNEL = Kernel(moe_align_place_kernel)


@implementation(
    operator="moe_align_block_size",
    devices=("nvidia",),
    slot=0,
)
class CudaMoeAlignBlockSize(MoeAlignBlockSize):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        topk_ids, expert_map = args.topk_ids, args.expert_map
        sorted_ids, expert_ids = args.sorted_token_ids, args.experts_ids
        view = matrix_view(topk_ids)
        # Ids whose dimensions do not merge into two are copied contiguous
        # at launch (a rare layout; the copy is one small kernel).
        self.flatten = view is None
        if self.flatten:
            view = (1, 1, 0)
        sort = ExpertSortPlan(
            self.device, topk_ids, view, expert_map, self.numel, self.num_experts
        )
        self.sort = sort
        constexprs = dict(sort.constexprs)
        blocks_step = max(16, BLOCKS_STEP_ELEMENTS // sort.all_experts)
        constexprs.update(
            {
                "HAS_MAP": expert_map is not None,
                "PAD_BLOCK": min(
                    next_power_of_two(max(self.block_size - 1, 1)), PAD_BLOCK_LIMIT
                ),
                "FILL": FILL_BLOCK,
                "BLOCKS_STEP": blocks_step,
            }
        )
        self._place = KERNEL.bind(
            grid=sort.grid,
            arguments=(
                sorted_ids,
                expert_ids,
                args.num_tokens_post_pad,
                topk_ids,
                expert_map if expert_map is not None else Pointer(topk_ids.dtype),
                Pointer("int32"),
                Pointer("int32"),
                self.numel,
                *view,
                expert_map.shape[0] if expert_map is not None else 0,
                expert_map.strides[0] if expert_map is not None else 0,
                self.num_experts,
                self.block_size,
                sort.chunks,
                sort.table_width,
                sorted_ids.shape[0],
                sorted_ids.strides[0],
                expert_ids.shape[0],
                expert_ids.strides[0],
            ),
            constexprs=constexprs,
            device=self.device,
        )
        self.outputs_staging = OutputStaging(
            (sorted_ids, expert_ids, args.num_tokens_post_pad), (topk_ids, expert_map)
        )

    def launch(
        self,
        stream,
        topk_ids,
        expert_map,
        sorted_token_ids,
        experts_ids,
        num_tokens_post_pad,
    ) -> None:
        outputs = (sorted_token_ids, experts_ids, num_tokens_post_pad)
        with stream_context(self.device, stream):
            targets = self.outputs_staging.targets(outputs, (topk_ids, expert_map))
            ids = topk_ids.contiguous() if self.flatten else topk_ids
            table = ids if expert_map is None else expert_map
            counts, totals = self.sort.count(stream, ids, expert_map)
            self._place(stream, *(targets or outputs), ids, table, counts, totals)
            if targets is not None:
                OutputStaging.finish(targets, outputs)
