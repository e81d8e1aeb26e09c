"""CPU `grouped_topk` (slot 0): one Numba kernel over tokens."""

from __future__ import annotations

import numpy as np

from infini.ops.base.grouped_topk import GroupedTopk
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import torch_dtypes
from infini.ops.native.cpu.routing import (
    OutputStaging,
    addresses_of,
    gating_chunks,
    grouped_topk_kernels,
    integer_code,
    real_code,
    spans_of,
    strides2,
)


@implementation(operator="grouped_topk", devices=("cpu",), slot=0)
class CpuGroupedTopk(GroupedTopk):
    def __init__(self, args) -> None:
        super().__init__(args)
        values, indices = args.topk_values, args.topk_indices
        scores, bias = args.scores, args.bias
        operands = (values, indices, scores, bias)
        self.spans = spans_of(operands)
        self.strides = np.array([strides2(m) for m in operands], np.int64)
        self.codes = np.array(
            [0, integer_code(indices), real_code(scores), real_code(bias)], np.int64
        )
        self.chunks = gating_chunks(self.tokens, self.experts)
        serial, parallel = grouped_topk_kernels()
        self.kernel = parallel if self.chunks > 1 else serial
        self.staging = OutputStaging((values, indices), (scores, bias))

    def launch(self, stream, scores, bias, topk_values, topk_indices) -> None:
        if self.tokens == 0:
            return
        outputs = (topk_values, topk_indices)
        targets = self.staging.targets(outputs, (scores, bias))
        self.kernel(
            self.chunks,
            (
                addresses_of((targets[0], targets[1], scores, bias)),
                self.spans,
                self.codes,
                self.tokens,
                self.experts,
                self.groups,
                self.topk_group,
                self.topk,
                self.strides,
                self.renormalize,
                self.routed_scaling_factor,
                self.sigmoid,
            ),
        )
        OutputStaging.finish(targets, outputs)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial (few tokens) and parallel kernels; dtypes are
        run-time codes of one compilation."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for tokens in (1, 512):
                scores = torch.zeros(tokens, 256, dtype=dtype)
                bias = torch.zeros(256)
                values = torch.empty(tokens, 8)
                indices = torch.empty(tokens, 8, dtype=torch.int32)
                infini.ops.grouped_topk(
                    scores,
                    bias,
                    8,
                    4,
                    8,
                    True,
                    2.5,
                    1,
                    values,
                    indices,
                    implementation_index=0,
                )
                calls += 1
        return calls
