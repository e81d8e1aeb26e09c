"""`scaled_softmax_infinilm`: the InfiniLM name of `scaled_softmax`."""

from __future__ import annotations

from .scaled_softmax import ScaledSoftmax


class ScaledSoftmaxInfinilm(ScaledSoftmax):
    """The same operator as `scaled_softmax` (see there), under InfiniLM's
    name: ``out = softmax(input.float() * scale, dim=-1)``, cast back."""

    name = "scaled_softmax_infinilm"
    trace_name = "ScaledSoftmaxInfinilm"
    overloads = ("input: Tensor, scale: float, out: Tensor!",)
