"""`moe_wna16_marlin_gemm`: vLLM's Mixture-of-Experts product with 4- or
8-bit integer expert weights in the Marlin layout."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._marlin import TILE, TILE_N, WEIGHT_TYPE_IDS, WEIGHT_TYPES, pack_factor

ACTIVATION_DTYPES = ("float16", "bfloat16", "float32")
ID_DTYPES = ("int32", "int64")
BLOCK_SIZES = (8, 16, 32, 48, 64)


class MoeWna16MarlinGemm(Operator):
    """vLLM `moe_wna16_marlin_gemm` (W4A16/W8A16 fused MoE): for every
    routed entry of the blocks `moe_align_block_size` made,

        ``out[t] = (a[t // top_k] @ W_e + bias_e) * topk_weights[t]``

    where ``t`` is an entry of `sorted_token_ids` (``token * top_k +
    slot``), ``e`` the expert of its block (`expert_ids`) and ``W_e`` expert
    ``e``'s dequantised ``(size_k, size_n)`` weight; the factor applies when
    `mul_topk_weights`, the bias when `b_bias_or_none` is given.

    Routing:

    - `sorted_token_ids`, `expert_ids`, `num_tokens_past_padded` (int32 or
      int64, 1-D; the last one element): blocks ``b <
      num_tokens_past_padded / moe_block_size`` are processed, with expert
      ``expert_ids[b]`` (-1: an expert of another rank, block skipped) and
      entries ``sorted_token_ids[b * moe_block_size ...]``; entries not
      below ``size_m * top_k`` are padding. `num_tokens_past_padded` must be
      a multiple of `moe_block_size` within both tensors, experts in
      ``[-1, E)``, entries non-negative: checked when the operator runs,
      before anything is written.
    - `moe_block_size` is 8, 16, 32, 48 or 64 (vLLM's choices).
    - `a` is ``(size_m, size_k)``: the first product of a MoE layer passes
      the tokens with the router's `top_k`, the second the ``size_m =
      tokens * top_k`` activated rows with ``top_k = 1``.
    - `out` is ``(size_m * top_k, size_n)``, in `a`'s dtype; rows no
      processed entry reaches are left as they were (vLLM's kernel does not
      write them either).
    - `topk_weights` is float32 with ``size_m * top_k`` elements (read only
      when `mul_topk_weights`).

    Weights (all per expert, ``E = b_q_weight.shape[0]``):

    - `b_q_weight` is int32 ``(E, size_k / 16, size_n * 16 / pack)``, each
      expert in the Marlin layout for 16-bit activations (what
      `gptq_marlin_repack` / `awq_marlin_repack` write, `base/_marlin.py`).
      `size_k` is a multiple of 16, `size_n` of 64.
    - `b_type_id` is vLLM's `ScalarType.id` of the codes: `uint4b8` and
      `uint8b128` (GPTQ, symmetric: ``code - 8`` / ``code - 128``, no zero
      points), `uint4` and `uint8` (AWQ: ``code - zero``, `b_zeros_or_none`
      required).
    - `b_scales` is ``(E, G, size_n)`` in `a`'s dtype, ``G`` groups of
      ``size_k / G`` rows (``G`` divides `size_k`; ``G = 1``:
      channelwise), each row in Marlin's column order (vLLM's
      `marlin_permute_scales`: runs of 64 columns permuted, or of 32 when
      ``G = 1``). ``W[k, n] = (code - zero) * scale[group(k), n]``.
    - `b_zeros_or_none` is int32 ``(E, G, size_n / pack)``, zero-point
      codes in Marlin's order (`marlin_zero_points`: permuted like grouped
      scales, interleaved like the weights, packed in order along n).
      `is_zp_float` (HQQ's float zero points) is not supported.
    - `b_bias_or_none` is ``(E, size_n)`` in `a`'s dtype, in Marlin's
      column order (`marlin_permute_bias`: runs of 32).
    - Act-order (GPTQ `desc_act`): `g_idx_or_none` and `perm_or_none`
      (int32 or int64, ``(E, size_k)``; both or neither) give the rows of
      ``W_e`` the order `gptq_marlin_repack` gave them: row ``k`` multiplies
      column ``perm[e, k]`` of `a`. Its group is ``k / (size_k / G)`` when
      `is_full_k` (as vLLM's kernel computes it, ``G > 1``) and ``g_idx[e,
      k]`` otherwise (a shard of a row-parallel layer).

    Not supported here: 8-bit activations (`a_scales` must be None) and
    NVFP4 (`global_scale` must be None). `workspace`, `use_atomic_add`,
    `use_fp32_reduce`, `thread_k`, `thread_n` and `blocks_per_sm` tune the
    GPU kernel: on the CPU they are checked as vLLM checks them (``-1`` or
    positive; a given `thread_k`/`thread_n` divides `size_k`/`size_n`) and
    otherwise ignored. Products are accumulated in float32 and rounded
    once. float32 activations are a CPU extension (vLLM takes float16 and
    bfloat16). The catalog's signature has no `c_or_none` and no `is_ep`:
    `out` is the result, and expert -1 blocks are always skipped.
    """

    name = "moe_wna16_marlin_gemm"
    trace_name = "MoeWna16MarlinGemm"
    overloads = (
        "a: Tensor, b_q_weight: Tensor, b_bias_or_none: Tensor|None, "
        "b_scales: Tensor, a_scales: Tensor|None, global_scale: Tensor|None, "
        "b_zeros_or_none: Tensor|None, g_idx_or_none: Tensor|None, "
        "perm_or_none: Tensor|None, workspace: Tensor, sorted_token_ids: Tensor, "
        "expert_ids: Tensor, num_tokens_past_padded: Tensor, "
        "topk_weights: Tensor, moe_block_size: int, top_k: int, "
        "mul_topk_weights: bool, b_type_id: int, size_m: int, size_n: int, "
        "size_k: int, is_full_k: bool, use_atomic_add: bool, "
        "use_fp32_reduce: bool, is_zp_float: bool, thread_k: int, "
        "thread_n: int, blocks_per_sm: int, out: Tensor!",
    )
    defaults = {
        "b_bias_or_none": None,
        "a_scales": None,
        "global_scale": None,
        "b_zeros_or_none": None,
        "g_idx_or_none": None,
        "perm_or_none": None,
    }

    def __init__(self, args) -> None:
        super().__init__(args)
        self._check_scalars(args)
        size_m, size_n, size_k = args.size_m, args.size_n, args.size_k
        top_k = args.top_k
        a, weight, out = args.a, args.b_q_weight, args.out
        self.require_dtype("a", a, ACTIVATION_DTYPES)
        self.require_shape("a", a, (size_m, size_k), "(`size_m`, `size_k`)")
        bits, code_bias, needs_zeros = WEIGHT_TYPES[WEIGHT_TYPE_IDS[args.b_type_id]]
        pack = pack_factor(bits)
        self.require_dtype("b_q_weight", weight, ("int32",))
        self.require_ndim("b_q_weight", weight, (3,))
        experts = weight.shape[0]
        self.require_shape(
            "b_q_weight",
            weight,
            (experts, size_k // TILE, size_n * TILE // pack),
            f"(experts, `size_k` / 16, `size_n` * 16 / {pack}) for "
            f"{bits}-bit codes in the Marlin layout",
        )
        if experts < 1:
            raise self.error("`b_q_weight` must hold at least one expert.")
        scales = args.b_scales
        self.require_dtype("b_scales", scales, (a.dtype,))
        self.require_ndim("b_scales", scales, (3,))
        groups = scales.shape[1]
        self.require_shape(
            "b_scales", scales, (experts, groups, size_n), "(experts, groups, `size_n`)"
        )
        if groups < 1 or size_k % groups:
            raise self.error(
                f"`b_scales` must have a number of groups dividing `size_k` "
                f"({size_k}), got {groups}."
            )
        zeros = args.b_zeros_or_none
        if needs_zeros and zeros is None:
            raise self.error(
                f"`b_zeros_or_none` is required for `b_type_id` "
                f"{WEIGHT_TYPE_IDS[args.b_type_id]} (codes with zero points)."
            )
        if not needs_zeros and zeros is not None:
            raise self.error(
                f"`b_zeros_or_none` must be None for `b_type_id` "
                f"{WEIGHT_TYPE_IDS[args.b_type_id]} (symmetric codes)."
            )
        if zeros is not None:
            self.require_dtype("b_zeros_or_none", zeros, ("int32",))
            self.require_shape(
                "b_zeros_or_none",
                zeros,
                (experts, groups, size_n // pack),
                f"(experts, groups, `size_n` / {pack})",
            )
        bias = args.b_bias_or_none
        if bias is not None:
            self.require_dtype("b_bias_or_none", bias, (a.dtype,))
            self.require_shape(
                "b_bias_or_none", bias, (experts, size_n), "(experts, `size_n`)"
            )
        g_idx, perm = args.g_idx_or_none, args.perm_or_none
        if (g_idx is None) != (perm is None):
            raise self.error(
                "`g_idx_or_none` and `perm_or_none` must both be given (act-order) "
                "or both be None."
            )
        act_order = g_idx is not None
        if act_order:
            for name, meta in (("g_idx_or_none", g_idx), ("perm_or_none", perm)):
                self.require_dtype(name, meta, ID_DTYPES)
                self.require_shape(name, meta, (experts, size_k), "(experts, `size_k`)")
            if args.is_full_k and groups < 2:
                raise self.error(
                    "act-order with `is_full_k` needs more than one group in "
                    f"`b_scales`, got {groups}."
                )
            if perm.dtype != g_idx.dtype:
                raise self.error(
                    f"`perm_or_none` has dtype {perm.dtype} but `g_idx_or_none` "
                    f"has dtype {g_idx.dtype}; they must match."
                )
        block = args.moe_block_size
        routing = {
            "sorted_token_ids": args.sorted_token_ids,
            "expert_ids": args.expert_ids,
            "num_tokens_past_padded": args.num_tokens_past_padded,
        }
        for name, meta in routing.items():
            self.require_dtype(name, meta, ID_DTYPES)
            self.require_ndim(name, meta, (1,))
        self.require_same_dtype("sorted_token_ids", routing)
        if args.num_tokens_past_padded.numel != 1:
            raise self.error(
                "`num_tokens_past_padded` must have exactly one element, got "
                f"shape {args.num_tokens_past_padded.shape}."
            )
        if args.mul_topk_weights:
            self.require_dtype("topk_weights", args.topk_weights, ("float32",))
            if args.topk_weights.numel != size_m * top_k:
                raise self.error(
                    f"`topk_weights` must hold `size_m` * `top_k` ({size_m * top_k}) "
                    f"weights, got shape {args.topk_weights.shape}."
                )
        self.require_dtype("out", out, (a.dtype,))
        self.require_shape(
            "out", out, (size_m * top_k, size_n), "(`size_m` * `top_k`, `size_n`)"
        )
        self.require_writable("out", out)
        for name in (
            "a",
            "b_q_weight",
            "b_scales",
            "b_zeros_or_none",
            "b_bias_or_none",
            "g_idx_or_none",
            "perm_or_none",
            "sorted_token_ids",
            "expert_ids",
            "topk_weights",
            "out",
        ):
            meta = getattr(args, name)
            if meta is not None and not meta.is_contiguous():
                raise self.error(
                    f"`{name}` must be packed (contiguous), got shape {meta.shape} "
                    f"and strides {meta.strides}."
                )
        self.num_bits, self.code_bias = bits, code_bias
        self.experts, self.groups, self.block = experts, groups, block
        self.act_order = act_order
        # vLLM's kernel runs act-order with a full K as a grouped product of
        # the reordered rows, and looks `g_idx` up otherwise.
        self.groups_from_index = act_order and not args.is_full_k
        self.group_size = size_k // groups if groups > 1 else -1

    def _check_scalars(self, args) -> None:
        if args.b_type_id not in WEIGHT_TYPE_IDS:
            names = ", ".join(
                f"{name} ({id})" for id, name in sorted(WEIGHT_TYPE_IDS.items())
            )
            raise self.error(
                f"`b_type_id` {args.b_type_id} is not a supported weight type; "
                f"supported (vLLM `ScalarType.id`): {names}."
            )
        for name in ("size_m", "top_k"):
            if getattr(args, name) < (0 if name == "size_m" else 1):
                bound = "non-negative" if name == "size_m" else "positive"
                raise self.error(
                    f"`{name}` must be {bound}, got {getattr(args, name)}."
                )
        if args.size_k <= 0 or args.size_k % TILE:
            raise self.error(
                f"`size_k` must be a positive multiple of {TILE}, got {args.size_k}."
            )
        if args.size_n <= 0 or args.size_n % TILE_N:
            raise self.error(
                f"`size_n` must be a positive multiple of {TILE_N}, got {args.size_n}."
            )
        if args.moe_block_size not in BLOCK_SIZES:
            raise self.error(
                f"`moe_block_size` must be one of {BLOCK_SIZES}, got "
                f"{args.moe_block_size}."
            )
        if args.a_scales is not None:
            raise self.error(
                "`a_scales` must be None: 8-bit activations are not supported "
                "by this implementation."
            )
        if args.global_scale is not None:
            raise self.error(
                "`global_scale` must be None: NVFP4 weights are not supported by "
                "this implementation."
            )
        if args.is_zp_float:
            raise self.error(
                "`is_zp_float` must be False: float zero points (HQQ) are not "
                "supported by this implementation."
            )
        for name in ("thread_k", "thread_n", "blocks_per_sm"):
            value = getattr(args, name)
            if value != -1 and value < 1:
                raise self.error(f"`{name}` must be -1 or positive, got {value}.")
        for name, size in (("thread_k", "size_k"), ("thread_n", "size_n")):
            value = getattr(args, name)
            if value != -1 and getattr(args, size) % value:
                raise self.error(
                    f"`{name}` ({value}) must divide `{size}` ({getattr(args, size)})."
                )
