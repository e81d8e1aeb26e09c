"""`gelu_infinilm`: InfiniLM's `gelu`."""

from __future__ import annotations

from .gelu import Gelu


class GeluInfinilm(Gelu):
    """InfiniLM's name for `gelu`:
    ``out = torch.nn.functional.gelu(input, approximate=approximate)`` with
    `approximate` ``"none"`` or ``"tanh"``; dtypes, layouts and aliasing as
    `infini.ops.base.gelu`."""

    name = "gelu_infinilm"
    trace_name = "GeluInfinilm"
    overloads = ("input: Tensor, approximate: str, out: Tensor!",)
