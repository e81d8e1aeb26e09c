"""`causal_softmax_infinilm`: the InfiniLM name of `causal_softmax`."""

from __future__ import annotations

from .causal_softmax import CausalSoftmax


class CausalSoftmaxInfinilm(CausalSoftmax):
    """The same operator as `causal_softmax` (see there), under InfiniLM's
    name: softmax over the last dimension of ``(..., q, k)`` with element
    ``(i, j)`` masked when ``j > i + (k - q)``, computed in float32."""

    name = "causal_softmax_infinilm"
    trace_name = "CausalSoftmaxInfinilm"
    overloads = ("input: Tensor, out: Tensor!",)
