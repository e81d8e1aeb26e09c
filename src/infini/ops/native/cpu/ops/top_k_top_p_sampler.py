"""CPU `top_k_top_p_sampler` (slot 0): one Numba kernel over rows."""

from __future__ import annotations

import numpy as np

from infini.ops.base.top_k_top_p_sampler import TopKTopPSampler
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.sampling import TopKTopPLaunch, draw_seed


@implementation(operator="top_k_top_p_sampler", devices=("cpu",), slot=0)
class CpuTopKTopPSampler(TopKTopPLaunch, TopKTopPSampler):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.logits, args.k, args.p, None, args.out)

    def launch(self, stream, logits, k, p, out) -> None:
        if self.empty:
            return
        self.sample(logits, k, p, None, out, draw_seed(), np.uint64(0), False)
