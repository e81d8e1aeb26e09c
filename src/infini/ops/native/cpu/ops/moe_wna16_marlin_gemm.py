"""CPU `moe_wna16_marlin_gemm` (slot 0): parallel over (routed block,
64-column tile) pairs; each task unpacks its expert's 16 x 64 Marlin tiles
one k-tile at a time, dequantises them with the group's scales and zero
points, and accumulates its block's rows in float32
(`native/cpu/marlin.py`)."""

from __future__ import annotations

import numpy as np

from infini.ops.base.moe_wna16_marlin_gemm import MoeWna16MarlinGemm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu import marlin
from infini.ops.native.cpu.marlin import (
    BAD_EXPERT,
    BAD_GROUP,
    BAD_PADDED_COUNT,
    BAD_PERM,
    BAD_TOKEN,
    moe_gemm_kernel,
)


@implementation(operator="moe_wna16_marlin_gemm", devices=("cpu",), slot=0)
class CpuMoeWna16MarlinGemm(MoeWna16MarlinGemm):
    def __init__(self, args) -> None:
        super().__init__(args)
        size_n = args.size_n
        plan = np.zeros(marlin.PLAN_SIZE, dtype=np.int64)
        plan[marlin.SIZE_M], plan[marlin.SIZE_N] = args.size_m, size_n
        plan[marlin.SIZE_K], plan[marlin.TOP_K] = args.size_k, args.top_k
        plan[marlin.EXPERTS], plan[marlin.GROUPS] = self.experts, self.groups
        plan[marlin.GROUP_SIZE], plan[marlin.BLOCK] = self.group_size, self.block
        plan[marlin.SORTED_COUNT] = args.sorted_token_ids.numel
        plan[marlin.EXPERT_COUNT] = args.expert_ids.numel
        plan[marlin.CODE_BIAS] = self.code_bias
        plan[marlin.HAS_ZEROS] = args.b_zeros_or_none is not None
        plan[marlin.ACT_ORDER] = self.act_order
        plan[marlin.GROUPS_FROM_INDEX] = self.groups_from_index
        plan[marlin.MUL_TOPK] = args.mul_topk_weights
        plan[marlin.HAS_BIAS] = args.b_bias_or_none is not None
        self.plan = plan
        self.destinations = marlin.standard_tile_destinations(self.num_bits)
        self.scale_columns = marlin.scale_positions(size_n, self.groups)
        self.zero_columns = marlin.zero_positions(size_n, self.num_bits)
        self.bias_columns = marlin.bias_positions(size_n)
        self.size_k = args.size_k
        self.empty = args.out.numel == 0
        index_dtype = args.g_idx_or_none.dtype if self.act_order else "int32"
        self.run = moe_gemm_kernel(
            args.a.dtype, self.num_bits, args.sorted_token_ids.dtype, index_dtype
        )

    def launch(
        self,
        stream,
        a,
        b_q_weight,
        b_bias_or_none,
        b_scales,
        a_scales,
        global_scale,
        b_zeros_or_none,
        g_idx_or_none,
        perm_or_none,
        workspace,
        sorted_token_ids,
        expert_ids,
        num_tokens_past_padded,
        topk_weights,
        out,
    ) -> None:
        if self.empty:
            return
        code, position, value = self.run(
            out.data_ptr(),
            a.data_ptr(),
            b_q_weight.data_ptr(),
            b_scales.data_ptr(),
            0 if b_zeros_or_none is None else b_zeros_or_none.data_ptr(),
            0 if b_bias_or_none is None else b_bias_or_none.data_ptr(),
            0 if g_idx_or_none is None else g_idx_or_none.data_ptr(),
            0 if perm_or_none is None else perm_or_none.data_ptr(),
            sorted_token_ids.data_ptr(),
            expert_ids.data_ptr(),
            num_tokens_past_padded.data_ptr(),
            topk_weights.data_ptr(),
            self.plan,
            self.destinations,
            self.scale_columns,
            self.zero_columns,
            self.bias_columns,
        )
        if code:
            raise self._data_error(code, position, value)

    def _data_error(self, code: int, position: int, value: int):
        block, experts = self.block, self.experts
        if code == BAD_PADDED_COUNT:
            return self.error(
                f"`num_tokens_past_padded` is {value}: it must be a multiple of "
                f"`moe_block_size` ({block}) covering at most the entries of "
                f"`sorted_token_ids` ({self.plan[marlin.SORTED_COUNT]}) and the "
                f"blocks of `expert_ids` ({self.plan[marlin.EXPERT_COUNT]}); "
                "nothing was written."
            )
        if code == BAD_EXPERT:
            return self.error(
                f"`expert_ids[{position}]` is {value}, out of the range [-1, "
                f"{experts}) (-1 or an expert of `b_q_weight`); nothing was written."
            )
        if code == BAD_PERM:
            expert, row = divmod(position, self.size_k)
            return self.error(
                f"`perm_or_none[{expert}, {row}]` is {value}, out of the range "
                f"[0, {self.size_k}) (columns of `a`); nothing was written."
            )
        if code == BAD_GROUP:
            expert, row = divmod(position, self.size_k)
            return self.error(
                f"`g_idx_or_none[{expert}, {row}]` is {value}, out of the range "
                f"[0, {self.groups}) (groups of `b_scales`); nothing was written."
            )
        assert code == BAD_TOKEN, code
        return self.error(
            f"`sorted_token_ids[{position}]` is {value}: entries must be "
            "non-negative; nothing was written."
        )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each activation dtype and bit width, with
        int32 routing tensors (vLLM's)."""
        import torch

        import infini.ops
        from infini.ops.base._marlin import WEIGHT_TYPE_IDS

        ids = {name: id for id, name in WEIGHT_TYPE_IDS.items()}
        calls = 0
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            for name, bits in (("uint4b8", 4), ("uint8b128", 8)):
                pack = 32 // bits
                a = torch.zeros(1, 16, dtype=dtype)
                weight = torch.zeros(1, 1, 64 * 16 // pack, dtype=torch.int32)
                scales = torch.ones(1, 1, 64, dtype=dtype)
                sorted_ids = torch.zeros(8, dtype=torch.int32)
                expert_ids = torch.zeros(1, dtype=torch.int32)
                padded = torch.tensor([8], dtype=torch.int32)
                topk = torch.ones(1, 1)
                out = torch.empty(1, 64, dtype=dtype)
                infini.ops.moe_wna16_marlin_gemm(
                    a, weight, None, scales, None, None, None, None, None,
                    torch.zeros(1, dtype=torch.int32), sorted_ids, expert_ids,
                    padded, topk, 8, 1, True, ids[name], 1, 64, 16, True, False,
                    True, False, -1, -1, -1, out, implementation_index=0,
                )  # fmt: skip
                calls += 1
        return calls
