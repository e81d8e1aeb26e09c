"""CPU `top_k_top_p_sampler` (slot 0): one Numba kernel over rows."""

from __future__ import annotations

from infini.ops.base.top_k_top_p_sampler import TopKTopPSampler
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import torch_dtypes
from infini.ops.native.cpu.sampling import TopKTopPLaunch, draw_seed


@implementation(operator="top_k_top_p_sampler", devices=("cpu",), slot=0)
class CpuTopKTopPSampler(TopKTopPLaunch, TopKTopPSampler):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.logits, args.k, args.p, None, args.out)

    def launch(self, stream, logits, k, p, out) -> None:
        if self.empty:
            return
        self.sample(logits, k, p, None, out, draw_seed(), 0, False)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial (one row) and parallel kernels; dtypes are
        run-time codes of one compilation."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for rows in (1, 64):
                logits = torch.zeros(rows, 1024, dtype=dtype)
                k = torch.full((rows,), 8, dtype=torch.int64)
                p = torch.full((rows,), 0.9)
                out = torch.empty(rows, dtype=torch.int64)
                infini.ops.top_k_top_p_sampler(
                    logits, k, p, out, implementation_index=0
                )
                calls += 1
        return calls
