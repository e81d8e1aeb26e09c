"""CPU `paged_attention_prefill_infinilm` (slot 0): the online-softmax Numba
kernel of `native/cpu/attention.py`, one task per (sequence, kv head, block
of query tokens)."""

from __future__ import annotations

from infini.ops.base.paged_attention_prefill_infinilm import (
    PagedAttentionPrefillInfinilm,
)
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.attention import PagedAttentionLaunch


@implementation(operator="paged_attention_prefill_infinilm", devices=("cpu",), slot=0)
class CpuPagedAttentionPrefillInfinilm(
    PagedAttentionLaunch, PagedAttentionPrefillInfinilm
):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args, prefill=True)

    def launch(
        self,
        stream,
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        cum_seq_lens_q,
        alibi_slopes,
        out,
    ) -> None:
        self.run(
            q,
            k_cache,
            v_cache,
            block_tables,
            seq_lens,
            cum_seq_lens_q,
            alibi_slopes,
            out,
        )
