"""CPU `paged_attention_infinilm` (slot 0): the online-softmax Numba kernel
of `native/cpu/attention.py`, one task per (sequence, kv head)."""

from __future__ import annotations

from infini.ops.base.paged_attention_infinilm import PagedAttentionInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.attention import PagedAttentionLaunch
from infini.ops.native.cpu.precompile import index_dtypes, torch_dtypes


@implementation(operator="paged_attention_infinilm", devices=("cpu",), slot=0)
class CpuPagedAttentionInfinilm(PagedAttentionLaunch, PagedAttentionInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan(args, prefill=False)

    def launch(
        self, stream, q, k_cache, v_cache, block_tables, seq_lens, alibi_slopes, out
    ) -> None:
        self.run(q, k_cache, v_cache, block_tables, seq_lens, None, alibi_slopes, out)

    def bind_launch(
        self, stream, q, k_cache, v_cache, block_tables, seq_lens, alibi_slopes, out
    ):
        return self.bind(
            q, k_cache, v_cache, block_tables, seq_lens, None, alibi_slopes, out
        )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each dtype with block tables and lengths
        both int32 or both int64 (one compilation per combination, each
        slow: mixed index dtypes compile on first use)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            cache = torch.zeros(2, 2, 16, 64, dtype=dtype)
            q = torch.zeros(1, 4, 64, dtype=dtype)
            out = torch.empty_like(q)
            for index_dtype in index_dtypes():
                tables = torch.arange(2, dtype=index_dtype).view(1, 2)
                lengths = torch.full((1,), 32, dtype=index_dtype)
                infini.ops.paged_attention_infinilm(
                    q,
                    cache,
                    cache,
                    tables,
                    lengths,
                    None,
                    0.125,
                    out,
                    implementation_index=0,
                )
                calls += 1
        return calls
