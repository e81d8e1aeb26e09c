"""`topk_sigmoid`: vLLM's fused sigmoid + top-k MoE gating."""

from __future__ import annotations

from infini.ops.base._topk_gating import TopkGating


class TopkSigmoid(TopkGating):
    """vLLM `topk_sigmoid`: route each token to its `topk` best experts.

    - `gating_output` is ``(tokens, experts)`` float32, float16 or bfloat16,
      any strides; scores are ``sigmoid(gating_output)`` in float32.
    - `e_score_correction_bias` (optional, ``(experts,)``, any float dtype)
      is added to the scores for the selection only.
    - `topk` is the last dimension of the outputs, all ``(tokens, topk)``:
      `topk_weights` (float32, float16 or bfloat16) gets the selected
      (unbiased) scores, divided by their sum when `renormalize` (unless the
      sum is 0), then multiplied by `routed_scaling_factor`; `topk_ids`
      (int32, int64 or uint32) the expert ids in rank order: larger
      selection score first, NaN above every number, ties to the lower
      expert id (torch.topk's order); `token_expert_indices` (int32, int64
      or uint32) gets ``j * tokens + t`` at ``[t, j]``.
    - `is_padding` (optional, ``(tokens,)``, bool or integer; non-zero marks
      padding): padding rows get id -1 (all ones for uint32) and weight 0.
    - Zero tokens are allowed; outputs may overlap inputs (inputs are read
      first).
    """

    name = "topk_sigmoid"
    trace_name = "TopkSigmoid"
    overloads = (
        "gating_output: Tensor, e_score_correction_bias: Tensor|None, "
        "is_padding: Tensor|None, renormalize: bool, routed_scaling_factor: float, "
        "topk_weights: Tensor!, topk_ids: Tensor!, token_expert_indices: Tensor!",
    )
    defaults = {"e_score_correction_bias": None, "is_padding": None}
    scoring = "sigmoid"
    bias_name = "e_score_correction_bias"
    ids_name = "topk_ids"
