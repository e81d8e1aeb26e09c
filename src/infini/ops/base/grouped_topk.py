"""`grouped_topk`: DeepSeek-style grouped top-k MoE routing."""

from __future__ import annotations

from infini.ops.base._routing import SCORE_DTYPES, check_scores, check_topk_outputs
from infini.ops.core.operator import Operator

SCORING_FUNCTIONS = {0: "none", 1: "sigmoid"}
INDEX_DTYPES = ("int32", "int64")


class GroupedTopk(Operator):
    """DeepSeek-V3 grouped top-k routing (vLLM `grouped_topk`), per token:

    1. ``s = scores`` (`scoring_func` 0) or ``sigmoid(scores)`` (1), in
       float32; ``c = s + bias`` is the selection score.
    2. The experts form `num_expert_group` consecutive groups; a group's
       score is the sum of its two largest ``c``.
    3. The `topk_group` best groups are kept; the `topk` best experts by
       ``c`` among them are selected.
    4. `topk_values` gets ``s`` of the selected experts, divided by their sum
       when `renormalize` (unless the sum is 0), times
       `routed_scaling_factor`; `topk_indices` gets their ids.

    - `scores` ``(tokens, experts)`` float32, float16 or bfloat16, any
      strides; `bias` ``(experts,)``, any of those dtypes.
    - `topk_values` ``(tokens, topk)`` float32; `topk_indices`
      ``(tokens, topk)`` int32 (or int64).
    - Rank order everywhere (groups and experts): larger first, NaN above
      every number, ties to the lower index; the outputs list the experts in
      that order.
    - `experts` is a multiple of `num_expert_group` with at least two
      experts per group; ``1 <= topk_group <= num_expert_group`` and
      ``1 <= topk <= topk_group * experts / num_expert_group``.
    - Zero tokens are allowed; outputs may overlap inputs (read first).
    """

    name = "grouped_topk"
    trace_name = "GroupedTopk"
    overloads = (
        "scores: Tensor, bias: Tensor, num_expert_group: int, topk_group: int, "
        "topk: int, renormalize: bool, routed_scaling_factor: float, "
        "scoring_func: int, topk_values: Tensor!, topk_indices: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        tokens, experts = check_scores(self, "scores", args.scores)
        self.require_dtype("bias", args.bias, SCORE_DTYPES)
        self.require_shape("bias", args.bias, (experts,), "(one value per expert)")
        groups = args.num_expert_group
        if groups < 1 or experts % groups != 0:
            raise self.error(
                f"`num_expert_group` must be a positive divisor of the number of "
                f"experts {experts}, got {groups}."
            )
        if experts // groups < 2:
            raise self.error(
                f"every group needs at least two experts, but {experts} experts in "
                f"{groups} groups give {experts // groups}."
            )
        if not 1 <= args.topk_group <= groups:
            raise self.error(
                f"`topk_group` must be in [1, {groups}] (`num_expert_group`), got "
                f"{args.topk_group}."
            )
        candidates = args.topk_group * (experts // groups)
        if not 1 <= args.topk <= candidates:
            raise self.error(
                f"`topk` must be in [1, {candidates}] (the experts in `topk_group` "
                f"groups), got {args.topk}."
            )
        if args.scoring_func not in SCORING_FUNCTIONS:
            raise self.error(
                "`scoring_func` must be 0 (raw scores) or 1 (sigmoid), got "
                f"{args.scoring_func}."
            )
        check_topk_outputs(
            self,
            tokens,
            {"topk_values": args.topk_values, "topk_indices": args.topk_indices},
            {"topk_values": ("float32",), "topk_indices": INDEX_DTYPES},
        )
        if args.topk_values.shape[1] != args.topk:
            raise self.error(
                f"`topk_values` must have shape ({tokens}, {args.topk}) for `topk` = "
                f"{args.topk}, got {args.topk_values.shape}."
            )
        self.tokens, self.experts, self.groups = tokens, experts, groups
        self.topk_group, self.topk = args.topk_group, args.topk
        self.renormalize = bool(args.renormalize)
        self.routed_scaling_factor = float(args.routed_scaling_factor)
        self.sigmoid = args.scoring_func == 1
