"""CPU `moe_sum` (slot 0): one Numba kernel over tokens."""

from __future__ import annotations

import numpy as np

from infini.ops.base.moe_sum import MoeSum
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.memory import span
from infini.ops.native.cpu.routing import OutputStaging, gating_chunks, moe_sum_kernels


def _strides3(meta):
    if meta is None:
        return (0, 0, 0)
    return (tuple(meta.strides) + (0, 0, 0))[:3]


@implementation(operator="moe_sum", devices=("cpu",), slot=0)
class CpuMoeSum(MoeSum):
    def __init__(self, args) -> None:
        super().__init__(args)
        operands = (args.output, args.input, args.topk_ids, args.expert_map)
        self.spans = np.array(
            [0 if m is None else span(m.shape, m.strides) for m in operands], np.int64
        )
        self.strides = np.array([_strides3(m) for m in operands], np.int64)
        self.map_size = 0 if args.expert_map is None else args.expert_map.shape[0]
        self.chunks = gating_chunks(self.tokens, self.topk * self.hidden)
        serial, parallel = moe_sum_kernels(
            args.input.dtype,
            None if args.topk_ids is None else args.topk_ids.dtype,
            None if args.expert_map is None else args.expert_map.dtype,
        )
        self.kernel = parallel if self.chunks > 1 else serial
        self.staging = OutputStaging(
            (args.output,), (args.input, args.topk_ids, args.expert_map)
        )
        self.empty = self.tokens == 0 or self.hidden == 0

    def launch(self, stream, input, topk_ids, expert_map, output) -> None:
        if self.empty:
            return
        (target,) = self.staging.targets((output,), (input, topk_ids, expert_map))
        self.kernel(
            target.data_ptr(),
            input.data_ptr(),
            0 if topk_ids is None else topk_ids.data_ptr(),
            0 if expert_map is None else expert_map.data_ptr(),
            self.spans,
            self.tokens,
            self.topk,
            self.hidden,
            self.map_size,
            self.strides,
            self.chunks,
        )
        OutputStaging.finish((target,), (output,))
