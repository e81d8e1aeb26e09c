"""CPU `top_k_top_p_sample_infinilm` (slot 0): one Numba kernel over rows."""

from __future__ import annotations

from infini.ops.base.top_k_top_p_sample_infinilm import TopKTopPSampleInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.sampling import TopKTopPLaunch, seed_bits


@implementation(operator="top_k_top_p_sample_infinilm", devices=("cpu",), slot=0)
class CpuTopKTopPSampleInfinilm(TopKTopPLaunch, TopKTopPSampleInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args.logits, args.k, args.p, None, args.out)
        self.seed, self.offset = seed_bits(args.seed), seed_bits(args.offset)

    def launch(self, stream, logits, k, p, out) -> None:
        self.sample(logits, k, p, None, out, self.seed, self.offset, False)
