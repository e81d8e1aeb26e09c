"""CPU `get_cutlass_moe_mm_data` (slot 0): one serial pass that counts the
entries of each expert, one that writes the offsets and problem sizes, and
one that places every entry (a counting sort, stable in entry order)."""

from __future__ import annotations

import numpy as np

from infini.ops.base.get_cutlass_moe_mm_data import (
    BLOCKSCALE_ROWS,
    GetCutlassMoeMmData,
)
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.jit import kernel
from infini.ops.native.cpu.memory import element_array


@kernel
def moe_mm_data(
    ids_address, tokens, topk, ids_row, ids_column, num_experts, gated_n, n, k,
    swap, offsets_address, offsets_stride, sizes1_address, sizes1_row,
    sizes1_column, sizes2_address, sizes2_row, sizes2_column, input_address,
    input_stride, output_address, output_stride, scales_address, scales_stride,
    has_scales,
):  # fmt: skip
    """Strides are in elements; `has_scales` says whether `scales_address`
    (the block-scale offsets) is written."""
    entries = tokens * topk
    reach = (tokens - 1) * ids_row + (topk - 1) * ids_column + 1
    ids = element_array(ids_address, reach if entries else 0, np.int32)
    # Read every id before writing: an output may share the ids' memory.
    experts = np.empty(entries, np.int32)
    counts = np.zeros(num_experts, np.int32)
    for token in range(tokens):
        for slot in range(topk):
            expert = ids[token * ids_row + slot * ids_column]
            experts[token * topk + slot] = expert
            if 0 <= expert < num_experts:
                counts[expert] += 1
    offsets = element_array(offsets_address, num_experts * offsets_stride + 1, np.int32)
    sizes1 = element_array(
        sizes1_address, (num_experts - 1) * sizes1_row + 2 * sizes1_column + 1, np.int32
    )
    sizes2 = element_array(
        sizes2_address, (num_experts - 1) * sizes2_row + 2 * sizes2_column + 1, np.int32
    )
    scales = element_array(
        scales_address, num_experts * scales_stride + 1 if has_scales else 0, np.int32
    )
    starts = np.empty(num_experts, np.int32)
    total = np.int32(0)
    rounded = np.int32(0)
    offsets[0] = 0
    if has_scales:
        scales[0] = 0
    for expert in range(num_experts):
        count = counts[expert]
        starts[expert] = total
        total += count
        offsets[(expert + 1) * offsets_stride] = total
        if has_scales:
            rounded += (
                (count + BLOCKSCALE_ROWS - 1) // BLOCKSCALE_ROWS * BLOCKSCALE_ROWS
            )
            scales[(expert + 1) * scales_stride] = rounded
        first = expert * sizes1_row
        second = expert * sizes2_row
        if swap:
            sizes1[first] = gated_n
            sizes1[first + sizes1_column] = count
            sizes2[second] = k
            sizes2[second + sizes2_column] = count
        else:
            sizes1[first] = count
            sizes1[first + sizes1_column] = gated_n
            sizes2[second] = count
            sizes2[second + sizes2_column] = k
        sizes1[first + 2 * sizes1_column] = k
        sizes2[second + 2 * sizes2_column] = n
    inputs = element_array(
        input_address, (entries - 1) * input_stride + 1 if entries else 0, np.int32
    )
    outputs = element_array(
        output_address, (entries - 1) * output_stride + 1 if entries else 0, np.int32
    )
    for entry in range(entries):
        expert = experts[entry]
        if 0 <= expert < num_experts:
            place = starts[expert]
            starts[expert] = place + 1
            inputs[place * input_stride] = entry // topk
            outputs[entry * output_stride] = place
        else:
            outputs[entry * output_stride] = total
    return 0


@implementation(operator="get_cutlass_moe_mm_data", devices=("cpu",), slot=0)
class CpuGetCutlassMoeMmData(GetCutlassMoeMmData):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.num_experts = args.num_experts
        self.n = args.n
        self.k = args.k
        self.ids_strides = args.topk_ids.strides
        self.offsets_stride = args.expert_offsets.strides[0]
        self.sizes1_strides = args.problem_sizes1.strides
        self.sizes2_strides = args.problem_sizes2.strides
        self.input_stride = args.input_permutation.strides[0]
        self.output_stride = args.output_permutation.strides[0]
        scales = args.blockscale_offsets
        self.scales_stride = 0 if scales is None else scales.strides[0]

    def launch(
        self, stream, topk_ids, expert_offsets, problem_sizes1, problem_sizes2,
        input_permutation, output_permutation, blockscale_offsets,
    ) -> None:  # fmt: skip
        has_scales = blockscale_offsets is not None
        moe_mm_data(
            topk_ids.data_ptr(), self.tokens, self.topk, *self.ids_strides,
            self.num_experts, self.gated_n, self.n, self.k, self.swap,
            expert_offsets.data_ptr(), self.offsets_stride,
            problem_sizes1.data_ptr(), *self.sizes1_strides,
            problem_sizes2.data_ptr(), *self.sizes2_strides,
            input_permutation.data_ptr(), self.input_stride,
            output_permutation.data_ptr(), self.output_stride,
            blockscale_offsets.data_ptr() if has_scales else 0,
            self.scales_stride, has_scales,
        )  # fmt: skip

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel (one for every call)."""
        import torch

        import infini.ops

        ids = torch.zeros(2, 2, dtype=torch.int32)
        offsets = torch.empty(5, dtype=torch.int32)
        sizes = [torch.empty(4, 3, dtype=torch.int32) for _ in range(2)]
        permutations = [torch.empty(4, dtype=torch.int32) for _ in range(2)]
        infini.ops.get_cutlass_moe_mm_data(
            ids, 4, 8, 8, True, offsets, *sizes, *permutations,
            torch.empty(5, dtype=torch.int32), implementation_index=0,
        )  # fmt: skip
        return 1
