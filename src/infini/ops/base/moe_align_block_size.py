"""`moe_align_block_size`: vLLM's block-aligned token grouping for fused
MoE GEMMs."""

from __future__ import annotations

from infini.ops.core.operator import Operator

ID_DTYPES = ("int32", "int64")


class MoeAlignBlockSize(Operator):
    """vLLM `moe_align_block_size`: groups the (token, slot) entries of
    `topk_ids` by expert, each expert's list padded to a multiple of
    `block_size`.

    Let ``numel = topk_ids.numel()`` and entry ``i`` be the ``i``-th element
    of `topk_ids` in row-major order (``i = token * topk + slot``), with
    expert ``e_i`` (``expert_map[e_i]`` when `expert_map` is given: it maps
    global ids to local ones, -1 for experts of other ranks). Entries whose
    expert is negative or not below `num_experts` (or outside `expert_map`)
    are skipped. Expert ``e`` gets ``padded_e = ceil(count_e / block_size) *
    block_size`` places, experts in ascending order from place 0:

    - `sorted_token_ids` (1-D, int32 or int64): place ``start_e + r`` holds
      the ``r``-th entry ``i`` of expert ``e`` (entries in ascending order);
      every other place (padding, and everything past the total) holds
      ``numel``.
    - `experts_ids` (1-D, int32 or int64): block ``b`` (places
      ``b * block_size ...``) holds its expert; blocks past the total hold 0.
    - `num_tokens_post_pad` (one element, int32 or int64): the total
      ``sum_e padded_e``.

    The outputs must hold the worst case: `sorted_token_ids` at least
    ``numel + min(num_experts, numel) * (block_size - 1)`` places (vLLM
    allocates ``numel + num_experts * (block_size - 1)``), `experts_ids` at
    least that divided by `block_size` (rounded down). `topk_ids` may have
    any shape and strides.
    """

    name = "moe_align_block_size"
    trace_name = "MoeAlignBlockSize"
    overloads = (
        "topk_ids: Tensor, expert_map: Tensor|None, num_experts: int, "
        "block_size: int, sorted_token_ids: Tensor!, experts_ids: Tensor!, "
        "num_tokens_post_pad: Tensor!",
    )
    defaults = {"expert_map": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        topk_ids, expert_map = args.topk_ids, args.expert_map
        self.require_dtype("topk_ids", topk_ids, ID_DTYPES)
        if expert_map is not None:
            self.require_dtype("expert_map", expert_map, ID_DTYPES)
            self.require_ndim("expert_map", expert_map, (1,))
        if args.num_experts < 1:
            raise self.error(
                f"`num_experts` must be at least 1, got {args.num_experts}."
            )
        if args.block_size < 1:
            raise self.error(f"`block_size` must be at least 1, got {args.block_size}.")
        numel = topk_ids.numel
        worst = numel + min(args.num_experts, numel) * (args.block_size - 1)
        for name, needed in (
            ("sorted_token_ids", worst),
            ("experts_ids", worst // args.block_size),
        ):
            meta = getattr(args, name)
            self.require_dtype(name, meta, ID_DTYPES)
            self.require_ndim(name, meta, (1,))
            if meta.shape[0] < needed:
                raise self.error(
                    f"`{name}` must hold at least {needed} elements for {numel} "
                    f"entries, {args.num_experts} experts and `block_size` "
                    f"{args.block_size}, got {meta.shape[0]}."
                )
            self.require_writable(name, meta)
        count = args.num_tokens_post_pad
        self.require_dtype("num_tokens_post_pad", count, ID_DTYPES)
        if count.numel != 1:
            raise self.error(
                "`num_tokens_post_pad` must have exactly one element, got shape "
                f"{count.shape}."
            )
        self.numel = numel
        self.num_experts, self.block_size = args.num_experts, args.block_size
