"""CPU `top_k_top_p_sampling_from_logits` (slot 0): one Numba kernel over
rows."""

from __future__ import annotations

import torch

from infini.ops.base.top_k_top_p_sampling_from_logits import (
    TopKTopPSamplingFromLogits,
)
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import torch_dtypes
from infini.ops.native.cpu.sampling import TopKTopPLaunch, draw_seed


@implementation(operator="top_k_top_p_sampling_from_logits", devices=("cpu",), slot=0)
class CpuTopKTopPSamplingFromLogits(TopKTopPLaunch, TopKTopPSamplingFromLogits):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.logits, args.top_k, args.top_p, args.indices, args.out)

    def launch(self, stream, logits, top_k, top_p, indices, out) -> None:
        if self.empty:
            return
        if self.check_nan and bool(torch.isnan(logits).any()):
            raise self.error("`logits` contains NaN (`check_nan` is set).")
        if indices is not None:
            low, high = int(indices.min()), int(indices.max())
            if low < 0 or high >= self.logit_rows:
                raise self.error(
                    f"`indices` must be in [0, {self.logit_rows}) (rows of "
                    f"`logits`), got values in [{low}, {high}]."
                )
        seed = draw_seed() if self.seed is None else self.seed
        self.sample(logits, top_k, top_p, indices, out, seed, self.offset, self.joint)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial (one row) and parallel kernels; dtypes are
        run-time codes of one compilation."""
        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for rows in (1, 64):
                logits = torch.zeros(rows, 1024, dtype=dtype)
                top_k = torch.full((rows,), 8, dtype=torch.int32)
                top_p = torch.full((rows,), 0.9)
                out = torch.empty(rows, dtype=torch.int32)
                infini.ops.top_k_top_p_sampling_from_logits(
                    logits,
                    top_k,
                    top_p,
                    None,
                    "top_k_first",
                    True,
                    False,
                    3,
                    0,
                    out,
                    implementation_index=0,
                )
                calls += 1
        return calls
