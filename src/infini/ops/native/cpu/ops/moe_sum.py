"""CPU `moe_sum` (slot 0): one Numba kernel over tokens."""

from __future__ import annotations

import numpy as np

from infini.ops.base.moe_sum import MoeSum
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import torch_dtypes
from infini.ops.native.cpu.routing import (
    OutputStaging,
    addresses_of,
    gating_chunks,
    integer_code,
    moe_sum_kernels,
    real_code,
    spans_of,
)


def _strides3(meta):
    if meta is None:
        return (0, 0, 0)
    return (tuple(meta.strides) + (0, 0, 0))[:3]


@implementation(operator="moe_sum", devices=("cpu",), slot=0)
class CpuMoeSum(MoeSum):
    def __init__(self, args) -> None:
        super().__init__(args)
        operands = (args.output, args.input, args.topk_ids, args.expert_map)
        self.spans = spans_of(operands)
        self.strides = np.array([_strides3(m) for m in operands], np.int64)
        self.codes = np.array(
            [
                real_code(args.output),
                real_code(args.input),
                integer_code(args.topk_ids),
                integer_code(args.expert_map),
            ],
            np.int64,
        )
        self.map_size = 0 if args.expert_map is None else args.expert_map.shape[0]
        self.chunks = gating_chunks(self.tokens, self.topk * self.hidden)
        serial, parallel = moe_sum_kernels()
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
            self.chunks,
            (
                addresses_of((target, input, topk_ids, expert_map)),
                self.spans,
                self.codes,
                self.tokens,
                self.topk,
                self.hidden,
                self.map_size,
                self.strides,
            ),
        )
        OutputStaging.finish((target,), (output,))

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial (few tokens) and parallel kernels; dtypes are
        run-time codes of one compilation."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for tokens in (1, 512):
                input = torch.zeros(tokens, 8, 256, dtype=dtype)
                output = torch.empty(tokens, 256, dtype=dtype)
                infini.ops.moe_sum(input, output, implementation_index=0)
                calls += 1
        return calls
