"""`moe_wna16_gemm`: the expert GEMM of a mixture-of-experts layer with 4-
or 8-bit grouped-quantised weights and 16-bit activations (vLLM
`moe_wna16_gemm`)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

WNA16_DTYPES = ("float16", "bfloat16", "float32")
WNA16_INDEX_DTYPES = ("int32", "int64")


class MoeWna16Gemm(Operator):
    """``output[t, s] = topk_weights[t, s] * (dequant(W[e]) @ input[t])`` for
    each entry ``(t, s)`` (token `t`, its `s`-th expert `e`) that
    `moe_align_block_size` placed in a block, as vLLM's CUDA kernel computes
    it. With ``m, k = input.shape`` and ``E, n = b_qweight.shape[:2]``:

    - `b_qweight` ``(E, n, k * bit / 8)`` uint8, vLLM's packing: for `bit` 8
      byte ``p`` of row ``(e, j)`` is the weight of input feature ``p``; for
      `bit` 4 byte ``p`` holds feature ``2p`` in its low four bits and
      ``2p + 1`` in its high four bits. Codes are unsigned.
    - `b_scales` ``(E, n, k / group)`` of `input`'s dtype: one scale per
      group of ``group = k / b_scales.shape[2]`` consecutive features.
    - `b_qzeros` (optional) ``(E, n * bit / 8, k / group)`` uint8: the zero
      point of column ``j`` and a group is byte ``(e, j, g)`` for `bit` 8,
      and for `bit` 4 the low (even ``j``) or high (odd ``j``) four bits of
      byte ``(e, j // 2, g)``. Without it the zero is 8 (`bit` 4) or 128
      (`bit` 8). A weight is ``(code - zero) * scale``.
    - `sorted_token_ids`, `expert_ids`, `num_tokens_post_pad`: the outputs
      of `moe_align_block_size` with ``block_size = block_size_m`` (int32 or
      int64). Place ``p`` holds entry ``t * top_k + s``; block ``b`` (places
      ``b * block_size_m ...``) is processed when ``b * block_size_m <
      num_tokens_post_pad`` and, when ``m <= block_size_m``, ``b <
      m * top_k`` (vLLM's bound on the blocks it launches); within a block,
      places are taken until the first one whose token is not below `m`
      (the padding). A block of expert -1 (another rank's) is skipped, as is
      one of an expert id not below `E`.
    - `output` ``(m, top_k, n)`` or ``(m * top_k, n)`` of `input`'s dtype is
      zeroed first; every entry not processed stays 0.
    - `topk_weights` (optional, float32, ``(m, top_k)``) multiplies each
      entry's result.
    - `block_size_k` must divide `k` and be a multiple of the group size
      with ``block_size_k / group`` in 1, 2, 4, 8, and `block_size_m` is at
      most 64 (vLLM's checks); `block_size_n` only tiles vLLM's launch.
    - float16 and bfloat16 (vLLM), float32 here too. Computed in float32:
      each weight dequantised in float32, products summed in float32,
      multiplied by the top-k weight and rounded once. vLLM's kernel rounds
      the dequantised weights and partial sums to the 16-bit type on the
      way, so results agree to that type's rounding. Any strides.
    """

    name = "moe_wna16_gemm"
    trace_name = "MoeWna16Gemm"
    overloads = (
        "input: Tensor, b_qweight: Tensor, b_scales: Tensor, "
        "b_qzeros: Tensor|None = None, topk_weights: Tensor|None = None, "
        "sorted_token_ids: Tensor, expert_ids: Tensor, num_tokens_post_pad: "
        "Tensor, top_k: int, block_size_m: int, block_size_n: int, "
        "block_size_k: int, bit: int, output: Tensor!",
    )
    defaults = {"b_qzeros": None, "topk_weights": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        input, qweight, scales = args.input, args.b_qweight, args.b_scales
        qzeros, weights, output = args.b_qzeros, args.topk_weights, args.output
        self.require_dtype("input", input, WNA16_DTYPES)
        self.require_ndim("input", input, (2,))
        dtype = input.dtype
        self.require_same_dtype(
            "input", {"input": input, "b_scales": scales, "output": output}
        )
        bit = args.bit
        if bit not in (4, 8):
            raise self.error(f"`bit` must be 4 or 8, got {bit}.")
        top_k = args.top_k
        if top_k < 1:
            raise self.error(f"`top_k` must be at least 1, got {top_k}.")
        m, k = input.shape
        self.require_dtype("b_qweight", qweight, ("uint8",))
        self.require_ndim("b_qweight", qweight, (3,))
        experts, n, packed = qweight.shape
        if packed * 8 != k * bit:
            raise self.error(
                f"`b_qweight` must have shape (experts, n, k * bit / 8) = "
                f"({experts}, {n}, {k * bit / 8:g}) for k = {k} and bit = {bit}, "
                f"got {qweight.shape}."
            )
        self.require_ndim("b_scales", scales, (3,))
        groups = scales.shape[2]
        if (
            scales.shape[:2] != (experts, n)
            or groups < 1
            or k % groups
            or (bit == 4 and (k // groups) % 2)
        ):
            raise self.error(
                f"`b_scales` must have shape (experts, n, k / group) = ({experts}, "
                f"{n}, groups) with groups dividing k = {k} (an even group size "
                f"for bit 4), got {scales.shape}."
            )
        group = k // groups
        if qzeros is not None:
            self.require_dtype("b_qzeros", qzeros, ("uint8",))
            expected = (experts, n * bit // 8, groups)
            if n * bit % 8 or tuple(qzeros.shape) != expected:
                raise self.error(
                    f"`b_qzeros` must have shape (experts, n * bit / 8, k / group) "
                    f"= {expected}, got {qzeros.shape}."
                )
        if weights is not None:
            self.require_dtype("topk_weights", weights, ("float32",))
            self.require_shape("topk_weights", weights, (m, top_k), "(tokens, top_k)")
        for name in ("sorted_token_ids", "expert_ids", "num_tokens_post_pad"):
            meta = getattr(args, name)
            self.require_dtype(name, meta, WNA16_INDEX_DTYPES)
        self.require_ndim("sorted_token_ids", args.sorted_token_ids, (1,))
        self.require_ndim("expert_ids", args.expert_ids, (1,))
        if args.num_tokens_post_pad.numel != 1:
            raise self.error(
                f"`num_tokens_post_pad` must hold one element, got shape "
                f"{args.num_tokens_post_pad.shape}."
            )
        block_m, block_k = args.block_size_m, args.block_size_k
        if not 1 <= block_m <= 64:
            raise self.error(f"`block_size_m` must be in [1, 64], got {block_m}.")
        if args.block_size_n < 1:
            raise self.error(
                f"`block_size_n` must be positive, got {args.block_size_n}."
            )
        if block_k < 1 or k % block_k or block_k % group or block_k // group not in (
            1, 2, 4, 8,
        ):  # fmt: skip
            raise self.error(
                f"`block_size_k` must divide k = {k} and be 1, 2, 4 or 8 groups "
                f"of {group} features, got {block_k}."
            )
        if output.shape not in ((m, top_k, n), (m * top_k, n)):
            raise self.error(
                f"`output` must have shape (m, top_k, n) = ({m}, {top_k}, {n}) or "
                f"(m * top_k, n), got {output.shape}."
            )
        self.require_writable("output", output)
        # Blocks vLLM launches: all of `sorted_token_ids`, or fewer when the
        # batch fits one block per entry.
        places = args.sorted_token_ids.shape[0]
        if m <= block_m:
            places = min(places, m * block_m * top_k)
        self.blocks = min(-(-places // block_m), args.expert_ids.shape[0])
        self.m, self.k, self.n, self.experts = m, k, n, experts
        self.group, self.groups, self.dtype = group, groups, dtype
