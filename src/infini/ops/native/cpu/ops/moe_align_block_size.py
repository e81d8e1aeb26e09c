"""CPU `moe_align_block_size` (slot 0): a serial counting sort in Numba."""

from __future__ import annotations

import numpy as np

from infini.ops.base.moe_align_block_size import MoeAlignBlockSize
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import index_dtypes
from infini.ops.native.cpu.routing import (
    OutputStaging,
    addresses_of,
    integer_code,
    moe_align_kernel,
    spans_of,
)


@implementation(operator="moe_align_block_size", devices=("cpu",), slot=0)
class CpuMoeAlignBlockSize(MoeAlignBlockSize):
    def __init__(self, args) -> None:
        super().__init__(args)
        topk_ids, expert_map = args.topk_ids, args.expert_map
        outputs = (args.sorted_token_ids, args.experts_ids, args.num_tokens_post_pad)
        operands = outputs + (topk_ids, expert_map)
        self.spans = spans_of(operands)
        self.codes = np.array([integer_code(m) for m in operands], np.int64)
        self.shape = np.array(topk_ids.shape or (1,), np.int64)
        self.id_strides = np.array(topk_ids.strides or (0,), np.int64)
        self.steps = np.array(
            [0 if m is None or not m.strides else m.strides[0] for m in operands],
            np.int64,
        )
        self.map_size = 0 if expert_map is None else expert_map.shape[0]
        self.sorted_length = args.sorted_token_ids.shape[0]
        self.block_count = args.experts_ids.shape[0]
        self.kernel = moe_align_kernel()
        self.staging = OutputStaging(outputs, (topk_ids, expert_map))

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
        targets = self.staging.targets(outputs, (topk_ids, expert_map))
        self.kernel(
            addresses_of(tuple(targets) + (topk_ids, expert_map)),
            self.spans,
            self.codes,
            self.shape,
            self.id_strides,
            self.steps,
            self.numel,
            self.num_experts,
            self.block_size,
            self.map_size,
            self.sorted_length,
            self.block_count,
        )
        OutputStaging.finish(targets, outputs)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the one (serial) kernel; index dtypes are run-time codes
        of that compilation."""
        import torch

        import infini.ops

        calls = 0
        for index_dtype in index_dtypes():
            topk_ids = torch.zeros(4, 2, dtype=index_dtype)
            length = topk_ids.numel() + 8 * 15
            sorted_ids = torch.empty(length, dtype=index_dtype)
            expert_ids = torch.empty(-(-length // 16), dtype=index_dtype)
            total = torch.empty(1, dtype=index_dtype)
            infini.ops.moe_align_block_size(
                topk_ids,
                None,
                8,
                16,
                sorted_ids,
                expert_ids,
                total,
                implementation_index=0,
            )
            calls += 1
        return calls
