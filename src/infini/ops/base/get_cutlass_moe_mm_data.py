"""`get_cutlass_moe_mm_data`: grouped-GEMM metadata for a mixture of experts
(vLLM `get_cutlass_moe_mm_data`)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

INDEX_DTYPES = ("int32",)


class GetCutlassMoeMmData(Operator):
    """From the experts each token was routed to (`topk_ids`, ``(tokens,
    topk)``), the metadata of the two grouped GEMMs of a mixture-of-experts
    layer with `num_experts` experts, `n` output and `k` input features:

    - `expert_offsets`: where each expert's rows start in the permuted
      activations (a prefix sum over the experts' row counts);
    - `problem_sizes1`, `problem_sizes2`: the ``(m, n, k)`` of each expert's
      first and second GEMM (the first one twice as wide when `is_gated`);
    - `input_permutation`, `output_permutation`: the gather into expert
      order and its inverse;
    - `blockscale_offsets` (optional): the offsets of block-scale rows.

    Every tensor is int32. The overload without `is_gated` means gated.
    Implemented by the original only for NVIDIA (native slot 0, vLLM at slot
    16); a build without such an implementation still has the function and
    the class, and a call raises a `ValueError` naming the operator and the
    device.
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
        if args.num_experts <= 0:
            raise self.error(f"`num_experts` must be positive, got {args.num_experts}.")
