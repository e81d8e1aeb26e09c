"""CPU `paged_attention_prefill_infinilm` (slot 0): the online-softmax Numba
kernel of `native/cpu/attention.py`, one task per (sequence, kv head, block
of query tokens)."""

from __future__ import annotations

from infini.ops.base.paged_attention_prefill_infinilm import (
    PagedAttentionPrefillInfinilm,
)
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.attention import PagedAttentionLaunch
from infini.ops.native.cpu.precompile import index_dtypes, torch_dtypes


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

    def bind_launch(self, stream, *tensors):
        return self.bind(*tensors)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each dtype with block tables, lengths and
        query offsets all int32 or all int64 (one compilation per
        combination, each slow: mixed index dtypes compile on first use),
        and the softmax kernel of sequences long enough for GEMMs."""
        import torch

        import infini.ops
        from infini.ops.native.cpu.attention import PAGED_BLAS_TOKENS

        calls = 0
        for dtype in torch_dtypes():
            cache = torch.zeros(8, 2, 16, 64, dtype=dtype)
            for index_dtype in index_dtypes():
                for tokens in (4, PAGED_BLAS_TOKENS):
                    q = torch.zeros(tokens, 4, 64, dtype=dtype)
                    out = torch.empty_like(q)
                    tables = torch.arange(8, dtype=index_dtype).view(1, 8)
                    lengths = torch.full((1,), 128, dtype=index_dtype)
                    cum = torch.tensor([0, tokens], dtype=index_dtype)
                    infini.ops.paged_attention_prefill_infinilm(
                        q,
                        cache,
                        cache,
                        tables,
                        lengths,
                        cum,
                        None,
                        0.125,
                        out,
                        implementation_index=0,
                    )
                    calls += 1
        return calls
