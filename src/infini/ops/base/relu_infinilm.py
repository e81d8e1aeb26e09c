"""`relu_infinilm`: InfiniLM's `relu`."""

from __future__ import annotations

from .relu import Relu


class ReluInfinilm(Relu):
    """InfiniLM's name for `relu` (`torch.nn.functional.relu`): negative
    elements become ``+0``, others are kept bit for bit (``-0.0`` and NaNs
    included). Every float and integer dtype but `bool`; `input` and `out`
    share one dtype and one shape; any strides; `out` may alias or overlap
    `input` (see `infini.ops.base.relu`)."""

    name = "relu_infinilm"
    trace_name = "ReluInfinilm"
    overloads = ("input: Tensor, out: Tensor!",)
