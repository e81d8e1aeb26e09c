"""CPU `flash_attn_with_kvcache` (slot 0): the kernel of
`native/cpu/flash.py`, which appends the new keys and values (rotated) to the
dense or paged cache, then runs one online-softmax task per (sequence, kv
head, block of query tokens)."""

from __future__ import annotations

import numpy as np

from infini.ops.base.flash_attn_with_kvcache import FlashAttnWithKvcache
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu import flash
from infini.ops.native.cpu.precompile import torch_dtypes

INDEX_NAMES = {
    "cu_q": "q",
    "cu_k": "cache_seqlens",
    "seqlens": "cache_seqlens",
    "batch_index": "cache_batch_idx",
    "leftpad": "cache_leftpad",
    "table": "block_table",
    "rotary": "rotary_cos",
    "max_q": "q",
    "max_k": "k_cache",
    "q": "q",
    "k": "k_cache",
}


@implementation(operator="flash_attn_with_kvcache", devices=("cpu",), slot=0)
class CpuFlashAttnWithKvcache(flash.FlashLaunch, FlashAttnWithKvcache):
    def __init__(self, args) -> None:
        super().__init__(args)
        q, k_cache, v_cache, out = args.q, args.k_cache, args.v_cache, args.out
        lse, k, v = args.softmax_lse, args.k, args.v
        batch, seqlen_q, heads, head_dim = q.shape
        kv_heads = k_cache.shape[2]
        plan = flash.empty_plan()
        plan[flash.SEQS] = batch
        plan[flash.HEADS], plan[flash.KV_HEADS] = heads, kv_heads
        plan[flash.FEATURES], plan[flash.VALUE_FEATURES] = head_dim, v_cache.shape[3]
        plan[flash.Q_LEN] = seqlen_q
        (
            plan[flash.Q_BATCH],
            plan[flash.Q_TOK],
            plan[flash.Q_HEAD],
            plan[flash.Q_COL],
        ) = q.strides
        (
            plan[flash.O_BATCH],
            plan[flash.O_TOK],
            plan[flash.O_HEAD],
            plan[flash.O_COL],
        ) = out.strides
        if lse is not None:
            plan[flash.HAS_LSE] = 1
            plan[flash.L_BATCH], plan[flash.L_HEAD], plan[flash.L_TOK] = lse.strides
        (
            plan[flash.K_BATCH],
            plan[flash.K_ROW],
            plan[flash.K_HEAD],
            plan[flash.K_COL],
        ) = k_cache.strides
        (
            plan[flash.V_BATCH],
            plan[flash.V_ROW],
            plan[flash.V_HEAD],
            plan[flash.V_COL],
        ) = v_cache.strides
        plan[flash.CACHE_ENTRIES] = k_cache.shape[0]
        plan[flash.K_ROWS] = self.capacity
        if self.paged:
            table = args.block_table
            plan[flash.K_MODE] = flash.KEYS_PAGED
            plan[flash.BLOCK_SIZE] = k_cache.shape[1]
            plan[flash.T_ROW], plan[flash.T_COL] = table.strides
            plan[flash.MAX_BLOCKS] = table.shape[1]
        else:
            plan[flash.K_MODE] = flash.KEYS_DENSE
        seqlens = args.cache_seqlens
        if seqlens is None:
            plan[flash.LEN_MODE] = flash.LENGTHS_FULL
        elif self.seqlens_tensor:
            plan[flash.LEN_MODE] = flash.LENGTHS_TENSOR
            plan[flash.SEQLENS_STEP] = seqlens.strides[0]
        else:
            plan[flash.LEN_MODE] = flash.LENGTHS_SCALAR
        if args.cache_batch_idx is not None:
            plan[flash.HAS_BATCH_INDEX] = 1
            plan[flash.BATCH_INDEX_STEP] = args.cache_batch_idx.strides[0]
        if args.cache_leftpad is not None:
            plan[flash.HAS_LEFTPAD] = 1
            plan[flash.LEFTPAD_STEP] = args.cache_leftpad.strides[0]
        if k is not None:
            plan[flash.NEW] = self.new
            (
                plan[flash.KN_BATCH],
                plan[flash.KN_TOK],
                plan[flash.KN_HEAD],
                plan[flash.KN_COL],
            ) = k.strides
            (
                plan[flash.VN_BATCH],
                plan[flash.VN_TOK],
                plan[flash.VN_HEAD],
                plan[flash.VN_COL],
            ) = v.strides
        left, right = (int(x) for x in self.window)
        if self.causal:
            right = 0
        left = left if left >= 0 else -1
        right = right if right >= 0 else -1
        plan[flash.LEFT], plan[flash.RIGHT] = left, right
        slopes = args.alibi_slopes
        if slopes is not None:
            plan[flash.HAS_ALIBI] = 1
            if len(slopes.shape) == 2:
                plan[flash.SLOPE_BATCH], plan[flash.SLOPE_HEAD] = slopes.strides
            else:
                plan[flash.SLOPE_HEAD] = slopes.strides[0]
        cos, sin = args.rotary_cos, args.rotary_sin
        if cos is not None:
            plan[flash.ROTARY_HALF] = self.rotary_half
            plan[flash.ROTARY_INTERLEAVED] = int(bool(args.rotary_interleaved))
            # flash-attn: queries rotate per token under a causal or local
            # mask, else all at the first new position.
            plan[flash.ROTARY_Q_PER_TOKEN] = int(self.causal or left >= 0 or right >= 0)
            plan[flash.ROTARY_ROWS] = cos.shape[0]
            plan[flash.COS_ROW], plan[flash.COS_COL] = cos.strides
            plan[flash.SIN_ROW], plan[flash.SIN_COL] = sin.strides
        plan[flash.BLOCK_TOKENS] = flash.block_tokens(heads, kv_heads)
        self.plan = plan
        spans = np.zeros(flash.OPERANDS, np.int64)
        for position, meta in (
            (flash.OUT, out),
            (flash.QUERY, q),
            (flash.KEY, k_cache),
            (flash.VALUE, v_cache),
            (flash.LSE, lse),
            (flash.TABLE, args.block_table),
            (flash.SEQLENS, seqlens if self.seqlens_tensor else None),
            (flash.BATCH_INDEX, args.cache_batch_idx),
            (flash.LEFTPAD, args.cache_leftpad),
            (flash.SLOPES, slopes),
            (flash.COS, cos),
            (flash.SIN, sin),
            (flash.KEY_NEW, k),
            (flash.VALUE_NEW, v),
        ):
            if meta is not None:
                spans[position] = span(meta.shape, meta.strides)
        self.spans = spans
        self.scale = float(self.scale)
        self.softcap = float(self.softcap)
        self.index_names = INDEX_NAMES
        self.kernel = flash.flash_attention_kernel(q.dtype)

    def launch(
        self,
        stream,
        q,
        k_cache,
        v_cache,
        k,
        v,
        rotary_cos,
        rotary_sin,
        cache_seqlens,
        cache_batch_idx,
        cache_leftpad,
        block_table,
        alibi_slopes,
        out,
        softmax_lse,
    ) -> None:
        operands = [None] * flash.OPERANDS
        operands[flash.OUT], operands[flash.QUERY] = out, q
        operands[flash.KEY], operands[flash.VALUE] = k_cache, v_cache
        operands[flash.LSE], operands[flash.TABLE] = softmax_lse, block_table
        operands[flash.SEQLENS] = cache_seqlens
        operands[flash.BATCH_INDEX] = cache_batch_idx
        operands[flash.LEFTPAD] = cache_leftpad
        operands[flash.SLOPES] = alibi_slopes
        operands[flash.COS], operands[flash.SIN] = rotary_cos, rotary_sin
        operands[flash.KEY_NEW], operands[flash.VALUE_NEW] = k, v
        self.launch_kernel(operands, self.cache_length or 0)

    @classmethod
    def precompile(cls) -> int:
        """Runs a decoding step that appends a rotated token, per dtype (the
        kernels are those of `flash_attn_varlen_func`: every feature is a
        runtime switch)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            q = torch.zeros(2, 1, 4, 16, dtype=dtype)
            cache = torch.zeros(2, 8, 2, 16, dtype=dtype)
            new = torch.zeros(2, 1, 2, 16, dtype=dtype)
            cos = torch.ones(8, 4, dtype=dtype)
            seqlens = torch.tensor([3, 5], dtype=torch.int32)
            out = torch.empty_like(q)
            infini.ops.flash_attn_with_kvcache(
                q, cache, cache.clone(), new, new, cos, cos, seqlens, None, None,
                None, None, None, True, [-1, -1], 0.0, False, 0, False, out, None,
                implementation_index=0,
            )  # fmt: skip
            calls += 1
        return calls
