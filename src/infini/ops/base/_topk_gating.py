"""The shared base of `topk_softmax` and `topk_sigmoid` (vLLM's fused MoE
gating kernels)."""

from __future__ import annotations

from infini.ops.base._routing import (
    PADDING_DTYPES,
    ROUTING_INDEX_DTYPES,
    SCORE_DTYPES,
    check_expert_vector,
    check_scores,
    check_topk_outputs,
)
from infini.ops.core.operator import Operator


class TopkGating(Operator):
    """Validation of ``(gating_output, <bias>, is_padding, ..., topk_weights,
    <ids>, token_expert_indices)``; subclasses name the bias and ids
    parameters and the scoring function."""

    scoring = "softmax"
    bias_name = "bias"
    ids_name = "topk_indices"

    def __init__(self, args) -> None:
        super().__init__(args)
        gating = args.gating_output
        self.tokens, self.experts = check_scores(self, "gating_output", gating)
        bias = getattr(args, self.bias_name)
        check_expert_vector(self, self.bias_name, bias, self.experts)
        padding = args.is_padding
        if padding is not None:
            self.require_dtype("is_padding", padding, PADDING_DTYPES)
            self.require_shape(
                "is_padding", padding, (self.tokens,), "(one flag per token)"
            )
        self.topk = check_topk_outputs(
            self,
            self.tokens,
            {
                "topk_weights": args.topk_weights,
                self.ids_name: getattr(args, self.ids_name),
                "token_expert_indices": args.token_expert_indices,
            },
            {
                "topk_weights": SCORE_DTYPES,
                self.ids_name: ROUTING_INDEX_DTYPES,
                "token_expert_indices": ROUTING_INDEX_DTYPES,
            },
        )
        if self.topk > self.experts:
            raise self.error(
                f"`topk` = {self.topk} (the last dimension of `topk_weights`) must "
                f"not exceed the number of experts {self.experts}."
            )
        self.renormalize = bool(args.renormalize)
        factor = getattr(args, "routed_scaling_factor", None)
        self.routed_scaling_factor = 1.0 if factor is None else float(factor)
