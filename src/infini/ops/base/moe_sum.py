"""`moe_sum`: sums each token's expert outputs (vLLM `moe_sum`)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

MOE_SUM_DTYPES = ("float32", "float16", "bfloat16")
ID_DTYPES = ("int32", "int64")


class MoeSum(Operator):
    """``output = input.sum(dim=1)`` for `input` ``(tokens, topk, hidden)``
    and `output` ``(tokens, hidden)``, accumulated in float32 and rounded
    once.

    - With `topk_ids` ``(tokens, topk)`` (int32 or int64), slot ``[t, j]``
      takes part only if its expert id is non-negative; with `expert_map`
      as well (1-D, int32 or int64, global id -> local id, -1 for experts of
      other ranks) the id is mapped first, and ids outside the map are
      skipped too. `expert_map` needs `topk_ids`.
    - float32, float16 or bfloat16 (`input` and `output` alike); any
      strides; zero-size tensors are allowed. `output` may overlap `input`
      (it is read first).
    """

    name = "moe_sum"
    trace_name = "MoeSum"
    overloads = (
        "input: Tensor, output: Tensor!",
        "input: Tensor, topk_ids: Tensor|None, expert_map: Tensor|None, "
        "output: Tensor!",
    )
    defaults = {"topk_ids": None, "expert_map": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        input, output = args.input, args.output
        topk_ids, expert_map = args.topk_ids, args.expert_map
        self.require_dtype("input", input, MOE_SUM_DTYPES)
        self.require_same_dtype("input", {"input": input, "output": output})
        self.require_ndim("input", input, (3,))
        tokens, topk, hidden = input.shape
        self.require_shape(
            "output", output, (tokens, hidden), "(`input` summed over dimension 1)"
        )
        self.require_writable("output", output)
        if topk_ids is not None:
            self.require_dtype("topk_ids", topk_ids, ID_DTYPES)
            self.require_shape(
                "topk_ids", topk_ids, (tokens, topk), "(the first two of `input`)"
            )
        if expert_map is not None:
            if topk_ids is None:
                raise self.error("`expert_map` needs `topk_ids`, got None.")
            self.require_dtype("expert_map", expert_map, ID_DTYPES)
            self.require_ndim("expert_map", expert_map, (1,))
        self.tokens, self.topk, self.hidden = tokens, topk, hidden
