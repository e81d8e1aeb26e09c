"""`topksoftmax_infinilm`: InfiniLM's softmax + top-k MoE routing."""

from __future__ import annotations

from infini.ops.base._routing import SCORE_DTYPES, check_scores, check_topk_outputs
from infini.ops.core.operator import Operator

INDEX_DTYPES = ("int32", "int64")


class TopksoftmaxInfinilm(Operator):
    """A float32 softmax over dimension 1 of `input` ``(tokens, experts)``,
    then the `topk` largest probabilities per token.

    - `input`: float32, float16 or bfloat16, any strides.
    - `values` ``(tokens, topk)`` (float32, float16 or bfloat16) gets the
      selected probabilities, divided by their sum when `norm` (unless the
      sum is 0); `indices` ``(tokens, topk)`` (int32 or int64) the expert
      ids. Both are in rank order: larger first, NaN above every number,
      ties to the lower expert id (torch.topk's order).
    - ``0 <= topk <= experts``; zero tokens are allowed; outputs may overlap
      `input` (it is read first).
    """

    name = "topksoftmax_infinilm"
    trace_name = "TopksoftmaxInfinilm"
    overloads = (
        "input: Tensor, topk: int, norm: bool, values: Tensor!, indices: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        tokens, experts = check_scores(self, "input", args.input)
        if not 0 <= args.topk <= experts:
            raise self.error(
                f"`topk` must be in [0, {experts}] (the number of experts), "
                f"got {args.topk}."
            )
        topk = check_topk_outputs(
            self,
            tokens,
            {"values": args.values, "indices": args.indices},
            {"values": SCORE_DTYPES, "indices": INDEX_DTYPES},
        )
        if topk != args.topk:
            raise self.error(
                f"`values` must have shape ({tokens}, {args.topk}) for `topk` = "
                f"{args.topk}, got {args.values.shape}."
            )
        self.topk = topk
        self.norm = bool(args.norm)
