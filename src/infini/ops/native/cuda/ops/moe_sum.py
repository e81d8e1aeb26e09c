"""CUDA-like `moe_sum` (slot 0) in Triton: ``output[t] = sum_j input[t, j]``.

A program covers a ``ROWS x BLOCK`` tile of ``(tokens, hidden)``: it walks
the `topk` slots, loading each slot's ``ROWS x BLOCK`` slice of `input`
(contiguous along `hidden`, so 128-bit loads on aligned rows) into a float32
accumulator, and rounds the tile once on the store. With `topk_ids`, a
slot's id (mapped through `expert_map` when given) is read per token and a
skipped slot's rows are not loaded at all (masked loads read nothing).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.moe_sum import MoeSum
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_or_zero, store_as
from infini.ops.native.cuda.routing import OutputStaging
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    require_device,
)

# Elements of a program's tile and the widest hidden block: 4096 float32
# accumulators over 8 warps are 16 per thread (four 128-bit loads per slot).
# The interpreter runs a program as NumPy steps, so it takes larger tiles.
GPU_TILE = 4096
GPU_BLOCK_LIMIT = 2048
INTERPRETER_TILE = 65536
INTERPRETER_BLOCK_LIMIT = 8192


@triton.jit
def moe_sum_kernel(
    output,
    input,
    topk_ids,
    expert_map,
    tokens,
    topk,
    hidden,
    map_size,
    input_stride0,
    input_stride1,
    input_stride2,
    output_stride0,
    output_stride1,
    ids_stride0,
    ids_stride1,
    map_stride,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_IDS: tl.constexpr,
    HAS_MAP: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    column = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    row_mask = row < tokens
    mask = row_mask[:, None] & (column < hidden)[None, :]
    source = input + row[:, None] * input_stride0 + column[None, :] * input_stride2
    total = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    for j in range(0, topk):
        take = mask
        if HAS_IDS:
            expert = tl.load(
                topk_ids + row * ids_stride0 + j * ids_stride1, mask=row_mask, other=-1
            ).to(tl.int64)
            if HAS_MAP:
                inside = row_mask & (expert >= 0) & (expert < map_size)
                mapped = tl.load(
                    expert_map + expert * map_stride, mask=inside, other=-1
                )
                expert = tl.where(inside, mapped.to(tl.int64), -1)
            take = mask & (expert >= 0)[:, None]
        total += load_or_zero(source + j * input_stride1, take, tl.float32)
    store_as(
        output + row[:, None] * output_stride0 + column[None, :] * output_stride1,
        total,
        mask,
    )


KERNEL = Kernel(moe_sum_kernel)


@implementation(
    operator="moe_sum",
    devices=("nvidia",),
    slot=0,
)
class CudaMoeSum(MoeSum):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, output = args.input, args.output
        topk_ids, expert_map = args.topk_ids, args.expert_map
        tokens, hidden = self.tokens, self.hidden
        if INTERPRETER:
            tile, limit = INTERPRETER_TILE, INTERPRETER_BLOCK_LIMIT
        else:
            tile, limit = GPU_TILE, GPU_BLOCK_LIMIT
        block = min(max(next_power_of_two(hidden), 16), limit)
        rows = max(1, min(tile // block, next_power_of_two(max(tokens, 1))))
        self.empty = tokens == 0 or hidden == 0
        self._launch = KERNEL.bind(
            grid=(-(-tokens // rows), -(-hidden // block)),
            arguments=(
                output,
                input,
                topk_ids if topk_ids is not None else Pointer("int32"),
                expert_map if expert_map is not None else Pointer("int32"),
                tokens,
                self.topk,
                hidden,
                expert_map.shape[0] if expert_map is not None else 0,
                *input.strides,
                *output.strides,
                *(topk_ids.strides if topk_ids is not None else (0, 0)),
                expert_map.strides[0] if expert_map is not None else 0,
            ),
            constexprs={
                "ROWS": rows,
                "BLOCK": block,
                "HAS_IDS": topk_ids is not None,
                "HAS_MAP": expert_map is not None,
            },
            device=self.device,
            num_warps=8 if rows * block >= 4096 else 4,
        )
        self.staging = OutputStaging((output,), (input, topk_ids, expert_map))

    def launch(self, stream, input, topk_ids, expert_map, output) -> None:
        if self.empty:
            return
        ids = input if topk_ids is None else topk_ids
        table = ids if expert_map is None else expert_map
        targets = self.staging.targets((output,), (input, topk_ids, expert_map))
        if targets is None:
            self._launch(stream, output, input, ids, table)
            return
        with stream_context(self.device, stream):
            self._launch(stream, targets[0], input, ids, table)
            OutputStaging.finish(targets, (output,))
