"""CPU `flash_attn_varlen_func` (slot 0): the online-softmax Numba kernel of
`native/cpu/flash.py`, one task per (sequence, kv head, block of query
tokens), packed or paged keys."""

from __future__ import annotations

import numpy as np

from infini.ops.base.flash_attn_varlen_func import FlashAttnVarlenFunc
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu import flash
from infini.ops.native.cpu.precompile import torch_dtypes

INDEX_NAMES = {
    "cu_q": "cu_seqlens_q",
    "cu_k": "cu_seqlens_k",
    "seqlens": "cu_seqlens_k",
    "batch_index": "cu_seqlens_k",
    "leftpad": "cu_seqlens_k",
    "table": "block_table",
    "rotary": "q",
    "max_q": "max_seqlen_q",
    "max_k": "max_seqlen_k",
    "q": "q",
    "k": "k",
}


@implementation(operator="flash_attn_varlen_func", devices=("cpu",), slot=0)
class CpuFlashAttnVarlenFunc(flash.FlashLaunch, FlashAttnVarlenFunc):
    def __init__(self, args) -> None:
        super().__init__(args)
        q, k, v, out, lse = args.q, args.k, args.v, args.out, args.softmax_lse
        heads, kv_heads = q.shape[1], k.shape[-2]
        plan = flash.empty_plan()
        plan[flash.SEQS] = self.batch
        plan[flash.HEADS], plan[flash.KV_HEADS] = heads, kv_heads
        plan[flash.FEATURES], plan[flash.VALUE_FEATURES] = q.shape[2], v.shape[-1]
        plan[flash.Q_PACKED], plan[flash.Q_ROWS] = 1, q.shape[0]
        plan[flash.Q_TOK], plan[flash.Q_HEAD], plan[flash.Q_COL] = q.strides
        plan[flash.O_TOK], plan[flash.O_HEAD], plan[flash.O_COL] = out.strides
        if lse is not None:
            plan[flash.HAS_LSE] = 1
            plan[flash.L_HEAD], plan[flash.L_TOK] = lse.strides
        plan[flash.LEN_MODE] = flash.LENGTHS_FROM_CU
        plan[flash.CU_Q_STEP] = args.cu_seqlens_q.strides[0]
        plan[flash.CU_K_STEP] = args.cu_seqlens_k.strides[0]
        if self.paged:
            table = args.block_table
            plan[flash.K_MODE] = flash.KEYS_PAGED
            plan[flash.CACHE_ENTRIES] = k.shape[0]
            plan[flash.BLOCK_SIZE] = k.shape[1]
            plan[flash.T_ROW], plan[flash.T_COL] = table.strides
            plan[flash.MAX_BLOCKS] = table.shape[1]
            plan[flash.K_ROWS] = table.shape[1] * k.shape[1]
            (
                plan[flash.K_BATCH],
                plan[flash.K_ROW],
                plan[flash.K_HEAD],
                plan[flash.K_COL],
            ) = k.strides
            (
                plan[flash.V_BATCH],
                plan[flash.V_ROW],
                plan[flash.V_HEAD],
                plan[flash.V_COL],
            ) = v.strides
        else:
            plan[flash.K_MODE] = flash.KEYS_PACKED
            plan[flash.K_ROWS] = k.shape[0]
            plan[flash.K_ROW], plan[flash.K_HEAD], plan[flash.K_COL] = k.strides
            plan[flash.V_ROW], plan[flash.V_HEAD], plan[flash.V_COL] = v.strides
        left, right = (int(x) for x in self.window)
        if self.causal:
            right = 0
        plan[flash.LEFT] = left if left >= 0 else -1
        plan[flash.RIGHT] = right if right >= 0 else -1
        slopes = args.alibi_slopes
        if slopes is not None:
            plan[flash.HAS_ALIBI] = 1
            if len(slopes.shape) == 2:
                plan[flash.SLOPE_BATCH], plan[flash.SLOPE_HEAD] = slopes.strides
            else:
                plan[flash.SLOPE_HEAD] = slopes.strides[0]
        plan[flash.BLOCK_TOKENS] = flash.block_tokens(heads, kv_heads)
        self.plan = plan
        self.plan[flash.MAX_Q], self.plan[flash.MAX_K] = (
            self.max_seqlen_q,
            self.max_seqlen_k,
        )
        spans = np.zeros(flash.OPERANDS, np.int64)
        for position, meta in (
            (flash.OUT, out),
            (flash.QUERY, q),
            (flash.KEY, k),
            (flash.VALUE, v),
            (flash.LSE, lse),
            (flash.TABLE, args.block_table),
            (flash.CU_Q, args.cu_seqlens_q),
            (flash.CU_K, args.cu_seqlens_k),
            (flash.SLOPES, slopes),
        ):
            if meta is not None:
                spans[position] = span(meta.shape, meta.strides)
        self.spans = spans
        self.scale = float(self.scale)
        self.softcap = float(self.softcap)
        self.index_names = INDEX_NAMES
        self.kernel = flash.flash_attention_kernel(q.dtype)

    def bind_call(self, max_seqlen_q: int, max_seqlen_k: int) -> None:
        super().bind_call(max_seqlen_q, max_seqlen_k)
        plan = getattr(self, "plan", None)
        if plan is not None:
            plan[flash.MAX_Q], plan[flash.MAX_K] = max_seqlen_q, max_seqlen_k

    def launch(
        self,
        stream,
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        alibi_slopes,
        block_table,
        out,
        softmax_lse,
        s_dmask,
    ) -> None:
        operands = [None] * flash.OPERANDS
        operands[flash.OUT], operands[flash.QUERY] = out, q
        operands[flash.KEY], operands[flash.VALUE] = k, v
        operands[flash.LSE], operands[flash.TABLE] = softmax_lse, block_table
        operands[flash.CU_Q], operands[flash.CU_K] = cu_seqlens_q, cu_seqlens_k
        operands[flash.SLOPES] = alibi_slopes
        self.launch_kernel(operands)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the driver, task and append kernels of each dtype (one
        call each: every feature is a runtime switch of the same kernels)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            q = torch.zeros(4, 4, 16, dtype=dtype)
            k = torch.zeros(6, 2, 16, dtype=dtype)
            cu_q = torch.tensor([0, 1, 4], dtype=torch.int32)
            cu_k = torch.tensor([0, 2, 6], dtype=torch.int32)
            out = torch.empty_like(q)
            infini.ops.flash_attn_varlen_func(
                q, k, k, cu_q, cu_k, 3, 4, out, implementation_index=0
            )
            calls += 1
        return calls
