"""`softmax_infinilm`: the InfiniLM name of `softmax`."""

from __future__ import annotations

from .softmax import Softmax


class SoftmaxInfinilm(Softmax):
    """The same operator as `softmax` (see there), under InfiniLM's name:
    ``out = torch.softmax(input, dim, dtype)``."""

    name = "softmax_infinilm"
    trace_name = "SoftmaxInfinilm"
    overloads = ("input: Tensor, dim: int, dtype: dtype|None, out: Tensor!",)
