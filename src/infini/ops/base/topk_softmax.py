"""`topk_softmax`: vLLM's fused softmax + top-k MoE gating."""

from __future__ import annotations

from infini.ops.base._topk_gating import TopkGating


class TopkSoftmax(TopkGating):
    """vLLM `topk_softmax`: route each token to its `topk` best experts.

    - `gating_output` is ``(tokens, experts)`` float32, float16 or bfloat16,
      any strides. Each row goes through a float32 softmax.
    - `bias` (optional, ``(experts,)``, any float dtype) is added to the
      probabilities for the selection only.
    - `topk` is the last dimension of the outputs, all ``(tokens, topk)``:
      `topk_weights` (float32, float16 or bfloat16) gets the selected
      (unbiased) probabilities, divided by their sum when `renormalize`
      (unless the sum is 0); `topk_indices` (int32, int64 or uint32) the
      expert ids, in rank order: larger selection score first, NaN above
      every number, ties to the lower expert id (torch.topk's order);
      `token_expert_indices` (int32, int64 or uint32) gets
      ``j * tokens + t`` at ``[t, j]``.
    - `is_padding` (optional, ``(tokens,)``, bool or integer; non-zero marks
      padding): padding rows get id -1 (all ones for uint32) and weight 0.
    - Zero tokens are allowed; outputs may overlap inputs (inputs are read
      first).
    """

    name = "topk_softmax"
    trace_name = "TopkSoftmax"
    overloads = (
        "gating_output: Tensor, bias: Tensor|None, is_padding: Tensor|None, "
        "renormalize: bool, topk_weights: Tensor!, topk_indices: Tensor!, "
        "token_expert_indices: Tensor!",
    )
    defaults = {"bias": None, "is_padding": None}
    scoring = "softmax"
    bias_name = "bias"
    ids_name = "topk_indices"
