"""`sigmoid_infinilm`: InfiniLM's `sigmoid`."""

from __future__ import annotations

from .sigmoid import Sigmoid


class SigmoidInfinilm(Sigmoid):
    """InfiniLM's name for `sigmoid`: ``out = 1 / (1 + exp(-input))``, as
    `torch.sigmoid`, with the same dtypes, layouts and aliasing rules (see
    `infini.ops.base.sigmoid`)."""

    name = "sigmoid_infinilm"
    trace_name = "SigmoidInfinilm"
    overloads = ("input: Tensor, out: Tensor!",)
