"""CUDA-like `get_cutlass_moe_mm_data` (slot 0) in Triton: a stable counting
sort of the entries of `topk_ids` by expert, and the grouped-GEMM metadata
it implies.

The counting launches are shared with `moe_align_block_size`
(`native/cuda/routing.py`): programs over (chunk of entries, block of
experts) count each expert's entries per chunk, and with many chunks a scan
turns the table into prefixes over chunks. The placing kernel here runs on
the same grid; each program rebuilds the experts' offsets from the totals
(an exclusive `tl.cumsum` over every expert, in registers) and writes, for
its chunk and its experts, ``input_permutation[place] = i // topk`` and
``output_permutation[i] = place`` with ``place = offset(e) + prefix(chunk,
e) + rank`` (the rank an exclusive `tl.cumsum` down the chunk's one-hot
tile: entries keep their order within an expert, as on the CPU). The
programs of the first expert block write the total for entries of no
expert; program 0 writes `expert_offsets`, the problem sizes and the
block-scale offsets.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.get_cutlass_moe_mm_data import (
    BLOCKSCALE_ROWS,
    GetCutlassMoeMmData,
)
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.routing import (
    ExpertSortPlan,
    OutputStaging,
    chunk_places,
    chunk_prefix_and_totals,
    entry_experts,
)
from infini.ops.runtime.triton import Kernel, Pointer, require_device

BLOCKSCALE = tl.constexpr(BLOCKSCALE_ROWS)


@triton.jit
def moe_mm_data_kernel(
    expert_offsets,
    problem_sizes1,
    problem_sizes2,
    input_permutation,
    output_permutation,
    blockscale_offsets,
    ids,
    counts,
    totals,
    entries,
    topk,
    ids_stride0,
    ids_stride1,
    experts,
    chunks,
    table_width,
    gated_n,
    n,
    k,
    offsets_stride,
    sizes1_stride0,
    sizes1_stride1,
    sizes2_stride0,
    sizes2_stride1,
    input_stride,
    output_stride,
    scales_stride,
    CHUNK: tl.constexpr,
    EXPERT_BLOCK: tl.constexpr,
    ALL_EXPERTS: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    SCANNED: tl.constexpr,
    SWAP: tl.constexpr,
    HAS_SCALES: tl.constexpr,
):
    chunk = tl.program_id(0).to(tl.int64)
    expert_block = tl.program_id(1)
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
    grand_total = tl.sum(total, axis=0)
    # The offsets of this program's experts (a where-sum: Triton 3.6 has no
    # register gather).
    before = every[None, :] < expert[:, None]
    start = tl.sum(tl.where(before, total[None, :], 0), axis=1)

    entry = chunk * CHUNK + tl.arange(0, CHUNK)
    inside = entry < entries
    routed = entry_experts(
        ids,
        entry,
        inside,
        topk,
        ids_stride0,
        ids_stride1,
        ids,
        0,
        0,
        experts,
        False,
    )
    place, mine = chunk_places(routed, expert, start + prefix)
    tl.store(
        input_permutation + place.to(tl.int64) * input_stride,
        (entry // topk).to(tl.int32),
        mask=mine,
    )
    # Entries of no expert go to the total, written by the first expert
    # block's programs.
    tl.store(output_permutation + entry * output_stride, place, mask=mine)
    if expert_block == 0:
        orphan = inside & (routed < 0)
        tl.store(
            output_permutation + entry * output_stride,
            tl.zeros([CHUNK], dtype=tl.int32) + grand_total,
            mask=orphan,
        )

    if (chunk == 0) & (expert_block == 0):
        real = every < experts
        ends = tl.cumsum(total, axis=0)
        tl.store(expert_offsets, 0)
        tl.store(expert_offsets + (every + 1) * offsets_stride, ends, mask=real)
        m = total
        wide = tl.zeros([ALL_EXPERTS], dtype=tl.int32) + gated_n
        inner = tl.zeros([ALL_EXPERTS], dtype=tl.int32) + k
        outer = tl.zeros([ALL_EXPERTS], dtype=tl.int32) + n
        first = problem_sizes1 + every * sizes1_stride0
        second = problem_sizes2 + every * sizes2_stride0
        if SWAP:
            tl.store(first, wide, mask=real)
            tl.store(first + sizes1_stride1, m, mask=real)
            tl.store(second, inner, mask=real)
            tl.store(second + sizes2_stride1, m, mask=real)
        else:
            tl.store(first, m, mask=real)
            tl.store(first + sizes1_stride1, wide, mask=real)
            tl.store(second, m, mask=real)
            tl.store(second + sizes2_stride1, inner, mask=real)
        tl.store(first + 2 * sizes1_stride1, inner, mask=real)
        tl.store(second + 2 * sizes2_stride1, outer, mask=real)
        if HAS_SCALES:
            rows = (total + BLOCKSCALE - 1) // BLOCKSCALE * BLOCKSCALE
            tl.store(blockscale_offsets, 0)
            tl.store(
                blockscale_offsets + (every + 1) * scales_stride,
                tl.cumsum(rows, axis=0),
                mask=real,
            )


KERNEL = Kernel(moe_mm_data_kernel)


@implementation(
    operator="get_cutlass_moe_mm_data",
    devices=("nvidia",),
    slot=0,
)
class CudaGetCutlassMoeMmData(GetCutlassMoeMmData):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        ids = args.topk_ids
        scales = args.blockscale_offsets
        entries = self.tokens * self.topk
        # Entry `i` is `ids[i // topk, i % topk]` (any `topk` when empty).
        columns = max(self.topk, 1)
        view = (columns, *ids.strides)
        sort = ExpertSortPlan(self.device, ids, view, None, entries, args.num_experts)
        self.sort = sort
        constexprs = dict(sort.constexprs)
        constexprs.update({"SWAP": self.swap, "HAS_SCALES": scales is not None})
        self._place = KERNEL.bind(
            grid=sort.grid,
            arguments=(
                args.expert_offsets,
                args.problem_sizes1,
                args.problem_sizes2,
                args.input_permutation,
                args.output_permutation,
                scales if scales is not None else Pointer("int32"),
                ids,
                Pointer("int32"),
                Pointer("int32"),
                entries,
                columns,
                *ids.strides,
                args.num_experts,
                sort.chunks,
                sort.table_width,
                self.gated_n,
                args.n,
                args.k,
                args.expert_offsets.strides[0],
                *args.problem_sizes1.strides,
                *args.problem_sizes2.strides,
                args.input_permutation.strides[0],
                args.output_permutation.strides[0],
                scales.strides[0] if scales is not None else 0,
            ),
            constexprs=constexprs,
            device=self.device,
        )
        outputs = (
            args.expert_offsets,
            args.problem_sizes1,
            args.problem_sizes2,
            args.input_permutation,
            args.output_permutation,
            scales,
        )
        self.outputs_staging = OutputStaging(outputs, (ids,))

    def launch(
        self, stream, topk_ids, expert_offsets, problem_sizes1, problem_sizes2,
        input_permutation, output_permutation, blockscale_offsets,
    ) -> None:  # fmt: skip
        outputs = (
            expert_offsets,
            problem_sizes1,
            problem_sizes2,
            input_permutation,
            output_permutation,
            blockscale_offsets,
        )
        with stream_context(self.device, stream):
            targets = self.outputs_staging.targets(outputs, (topk_ids,))
            written = list(targets or outputs)
            if written[5] is None:
                written[5] = topk_ids
            counts, totals = self.sort.count(stream, topk_ids, None)
            self._place(stream, *written, topk_ids, counts, totals)
            if targets is not None:
                OutputStaging.finish(
                    [t for t in targets if t is not None],
                    [out for out in outputs if out is not None],
                )
