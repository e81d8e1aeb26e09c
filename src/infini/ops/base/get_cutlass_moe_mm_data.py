"""`get_cutlass_moe_mm_data`: grouped-GEMM metadata for a mixture of experts
(vLLM `get_cutlass_moe_mm_data`)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

INDEX_DTYPES = ("int32",)

# vLLM's CUDA kernel writes the problem sizes of small batches (at most this
# many entries in `topk_ids`, no block scales) with M and N swapped: its
# grouped GEMM then computes the transposed products.
SWAP_AB_THRESHOLD = 64

# Block-scale rows are allotted per expert in multiples of this many rows.
BLOCKSCALE_ROWS = 128


class GetCutlassMoeMmData(Operator):
    """From the experts each token was routed to (`topk_ids`, ``(tokens,
    topk)``), the metadata of the two grouped GEMMs of a mixture-of-experts
    layer with `num_experts` experts, `n` output and `k` input features, as
    vLLM documents `get_cutlass_moe_mm_data` and its CUDA kernel computes.

    Entry ``i`` is element ``i`` of `topk_ids` in row-major order (token
    ``i // topk``); ``m_e`` is the number of entries routed to expert ``e``
    (ids outside ``[0, num_experts)``, such as vLLM's -1, belong to no
    expert), and ``total = sum(m_e)``.

    - `expert_offsets` (``num_experts + 1`` elements or more): the prefix
      sum, ``expert_offsets[0] = 0``, ``expert_offsets[e + 1] =
      expert_offsets[e] + m_e``.
    - `problem_sizes1`, `problem_sizes2` ``(num_experts, 3)``: the
      ``(M, N, K)`` of each expert's two GEMMs, ``(m_e, N1, k)`` and ``(m_e,
      k, n)`` with ``N1 = 2 * n`` when `is_gated` (gate and up projections)
      and ``n`` otherwise. When `topk_ids` has at most 64 entries and no
      `blockscale_offsets` is given, vLLM's kernel swaps M and N (its GEMMs
      then run transposed): ``(N1, m_e, k)`` and ``(k, m_e, n)``; so does
      this one.
    - `input_permutation` (at least ``tokens * topk`` elements): place
      ``expert_offsets[e] + r`` holds the token of the ``r``-th entry of
      expert ``e``; places from `total` on are left as they are. vLLM's
      kernel fills an expert's places in an unspecified order (atomic
      counters); here entries keep their order in `topk_ids`.
    - `output_permutation` (at least ``tokens * topk`` elements): element
      ``i`` is the place of entry ``i`` in `input_permutation`, and `total`
      for an entry of no expert (vLLM writes `total` for -1 and leaves other
      invalid ids unwritten; here every invalid id gets `total`).
    - `blockscale_offsets` (optional, ``num_experts + 1`` elements or more):
      like `expert_offsets` with each ``m_e`` rounded up to a multiple of
      128 (vLLM's FP4 path).

    Every tensor is int32 with any strides. The overload without `is_gated`
    means gated.
    """

    name = "get_cutlass_moe_mm_data"
    trace_name = "GetCutlassMoeMmData"
    overloads = (
        "topk_ids: Tensor, num_experts: int, n: int, k: int, is_gated: bool, "
        "expert_offsets: Tensor!, problem_sizes1: Tensor!, problem_sizes2: "
        "Tensor!, input_permutation: Tensor!, output_permutation: Tensor!, "
        "blockscale_offsets: Tensor|None! = None",
        "topk_ids: Tensor, num_experts: int, n: int, k: int, expert_offsets: "
        "Tensor!, problem_sizes1: Tensor!, problem_sizes2: Tensor!, "
        "input_permutation: Tensor!, output_permutation: Tensor!, "
        "blockscale_offsets: Tensor|None! = None",
    )
    defaults = {"is_gated": True, "blockscale_offsets": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        for name in (
            "topk_ids",
            "expert_offsets",
            "problem_sizes1",
            "problem_sizes2",
            "input_permutation",
            "output_permutation",
            "blockscale_offsets",
        ):
            meta = getattr(args, name)
            if meta is not None:
                self.require_dtype(name, meta, INDEX_DTYPES)
        self.require_ndim("topk_ids", args.topk_ids, (2,))
        num_experts = args.num_experts
        if num_experts <= 0:
            raise self.error(f"`num_experts` must be positive, got {num_experts}.")
        for name in ("n", "k"):
            value = getattr(args, name)
            if value < 0:
                raise self.error(f"`{name}` must not be negative, got {value}.")
        self.gated_n = 2 * args.n if args.is_gated else args.n
        if max(self.gated_n, args.k) >= 2**31:
            raise self.error(
                f"`n` and `k` must fit the int32 problem sizes, got n = {args.n} "
                f"and k = {args.k}."
            )
        self.tokens, self.topk = args.topk_ids.shape
        entries = args.topk_ids.numel
        needs = {
            "expert_offsets": (num_experts + 1, "`num_experts` + 1"),
            "input_permutation": (entries, "one per element of `topk_ids`"),
            "output_permutation": (entries, "one per element of `topk_ids`"),
            "blockscale_offsets": (num_experts + 1, "`num_experts` + 1"),
        }
        for name, (count, why) in needs.items():
            meta = getattr(args, name)
            if meta is None:
                continue
            self.require_ndim(name, meta, (1,))
            if meta.shape[0] < count:
                raise self.error(
                    f"`{name}` must hold at least {count} elements ({why}), got "
                    f"shape {meta.shape}."
                )
            self.require_writable(name, meta)
        for name in ("problem_sizes1", "problem_sizes2"):
            meta = getattr(args, name)
            self.require_shape(
                name, meta, (num_experts, 3), "(one (M, N, K) per expert)"
            )
            self.require_writable(name, meta)
        self.swap = args.blockscale_offsets is None and entries <= SWAP_AB_THRESHOLD
