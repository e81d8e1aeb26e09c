"""CPU `paged_attention_infinilm` (slot 0): the online-softmax Numba kernel
of `native/cpu/attention.py`, one task per (sequence, kv head)."""

from __future__ import annotations

from infini.ops.base.paged_attention_infinilm import PagedAttentionInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.attention import PagedAttentionLaunch


@implementation(operator="paged_attention_infinilm", devices=("cpu",), slot=0)
class CpuPagedAttentionInfinilm(PagedAttentionLaunch, PagedAttentionInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args, prefill=False)

    def launch(
        self, stream, q, k_cache, v_cache, block_tables, seq_lens, alibi_slopes, out
    ) -> None:
        self.run(q, k_cache, v_cache, block_tables, seq_lens, None, alibi_slopes, out)
