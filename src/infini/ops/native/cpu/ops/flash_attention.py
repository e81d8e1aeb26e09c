"""CPU `flash_attention` (slot 0): the online-softmax Numba kernel of
`native/cpu/flash.py` (shared with `flash_attn_varlen_func` and
`flash_attn_with_kvcache`), one task per (sequence, kv head, block of query
tokens)."""

from __future__ import annotations

import numpy as np

from infini.ops.base.flash_attention import FlashAttention
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu import flash
from infini.ops.native.cpu.precompile import torch_dtypes

INDEX_NAMES = {
    "cu_q": "cu_seqlens_q",
    "cu_k": "cu_seqlens_kv",
    "seqlens": "cu_seqlens_kv",
    "batch_index": "block_table",
    "leftpad": "cu_seqlens_kv",
    "table": "block_table",
    "rotary": "query",
    "max_q": "query",
    "max_k": "key",
    "q": "query",
    "k": "key",
}


@implementation(operator="flash_attention", devices=("cpu",), slot=0)
class CpuFlashAttention(flash.FlashLaunch, FlashAttention):
    def __init__(self, args) -> None:
        super().__init__(args)
        query, key, value, output = args.query, args.key, args.value, args.output
        cu_q, cu_kv, table = args.cu_seqlens_q, args.cu_seqlens_kv, args.block_table
        # Keys packed like the queries when only `cu_seqlens_q` is given.
        self.keys_like_queries = cu_q is not None and cu_kv is None and not self.paged
        if self.keys_like_queries:
            cu_kv = cu_q
        plan = flash.empty_plan()
        heads, kv_heads = args.num_heads, args.num_kv_heads
        plan[flash.HEADS], plan[flash.KV_HEADS] = heads, kv_heads
        plan[flash.FEATURES] = plan[flash.VALUE_FEATURES] = args.head_size
        plan[flash.Q_TOK], plan[flash.Q_HEAD], plan[flash.Q_COL] = query.strides
        plan[flash.O_TOK], plan[flash.O_HEAD], plan[flash.O_COL] = output.strides
        if cu_q is not None:
            plan[flash.SEQS] = cu_q.shape[0] - 1
            plan[flash.Q_PACKED], plan[flash.Q_ROWS] = 1, query.shape[0]
            plan[flash.CU_Q_STEP] = cu_q.strides[0]
        elif self.paged:
            # Decoding: query row `s` is the one token of sequence `s`.
            plan[flash.SEQS], plan[flash.Q_LEN] = table.shape[0], 1
            plan[flash.Q_BATCH], plan[flash.O_BATCH] = (
                query.strides[0],
                output.strides[0],
            )
        else:
            plan[flash.SEQS], plan[flash.Q_LEN] = 1, query.shape[0]
        if self.paged:
            plan[flash.K_MODE] = flash.KEYS_PAGED
            plan[flash.LEN_MODE] = flash.LENGTHS_FROM_CU
            plan[flash.CU_K_STEP] = cu_kv.strides[0]
            plan[flash.CACHE_ENTRIES] = key.shape[0]
            plan[flash.BLOCK_SIZE] = key.shape[1]
            plan[flash.T_ROW], plan[flash.T_COL] = table.strides
            plan[flash.MAX_BLOCKS] = table.shape[1]
            plan[flash.K_ROWS] = table.shape[1] * key.shape[1]
            (
                plan[flash.K_BATCH],
                plan[flash.K_ROW],
                plan[flash.K_HEAD],
                plan[flash.K_COL],
            ) = key.strides
            (
                plan[flash.V_BATCH],
                plan[flash.V_ROW],
                plan[flash.V_HEAD],
                plan[flash.V_COL],
            ) = value.strides
        else:
            plan[flash.K_ROWS] = key.shape[0]
            plan[flash.K_ROW], plan[flash.K_HEAD], plan[flash.K_COL] = key.strides
            plan[flash.V_ROW], plan[flash.V_HEAD], plan[flash.V_COL] = value.strides
            if cu_kv is not None:
                plan[flash.K_MODE] = flash.KEYS_PACKED
                plan[flash.LEN_MODE] = flash.LENGTHS_FROM_CU
                plan[flash.CU_K_STEP] = cu_kv.strides[0]
            else:
                plan[flash.K_MODE] = flash.KEYS_DENSE
                plan[flash.LEN_MODE] = flash.LENGTHS_FULL
                plan[flash.CACHE_ENTRIES] = 1
        plan[flash.LEFT], plan[flash.RIGHT] = self.window_left, self.window_right
        plan[flash.BLOCK_TOKENS] = flash.block_tokens(heads, kv_heads)
        self.plan = plan
        spans = np.zeros(flash.OPERANDS, np.int64)
        for position, meta in (
            (flash.OUT, output),
            (flash.QUERY, query),
            (flash.KEY, key),
            (flash.VALUE, value),
            (flash.TABLE, table),
            (flash.CU_Q, cu_q),
            (flash.CU_K, cu_kv),
        ):
            if meta is not None:
                spans[position] = span(meta.shape, meta.strides)
        self.spans = spans
        self.softcap = 0.0
        self.index_names = INDEX_NAMES
        cu_dtype = cu_kv.dtype if cu_kv is not None else "int32"
        self.kernel = flash.flash_attention_kernel(query.dtype, cu_dtype)

    def launch(
        self, stream, query, key, value, cu_seqlens_q, cu_seqlens_kv, block_table,
        output,
    ) -> None:  # fmt: skip
        operands = [None] * flash.OPERANDS
        operands[flash.OUT], operands[flash.QUERY] = output, query
        operands[flash.KEY], operands[flash.VALUE] = key, value
        operands[flash.TABLE] = block_table
        operands[flash.CU_Q] = cu_seqlens_q
        operands[flash.CU_K] = cu_seqlens_q if self.keys_like_queries else cu_seqlens_kv
        self.launch_kernel(operands)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the driver of each dtype with int32 and int64 offsets
        (the task kernels are shared with `flash_attn_varlen_func`)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            query = torch.zeros(4, 4, 16, dtype=dtype)
            key = torch.zeros(6, 2, 16, dtype=dtype)
            output = torch.empty_like(query)
            for index_dtype in (torch.int32, torch.int64):
                cu_q = torch.tensor([0, 1, 4], dtype=index_dtype)
                cu_kv = torch.tensor([0, 2, 6], dtype=index_dtype)
                infini.ops.flash_attention(
                    query, key, key, cu_q, cu_kv, None, 4, 2, 16, 0.25, True, -1, -1,
                    0, output, implementation_index=0,
                )  # fmt: skip
                calls += 1
        return calls
