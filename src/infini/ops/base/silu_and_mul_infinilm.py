"""`silu_and_mul_infinilm`: InfiniLM's `silu_and_mul`."""

from __future__ import annotations

from .silu_and_mul import SiluAndMul


class SiluAndMulInfinilm(SiluAndMul):
    """InfiniLM's name for `silu_and_mul`:
    ``out = silu(input[..., :h]) * input[..., h:]`` with ``h`` half the last
    dimension of `input`. Shapes, dtypes (float32, float64, float16,
    bfloat16), layouts and aliasing as `infini.ops.base.silu_and_mul`."""

    name = "silu_and_mul_infinilm"
    trace_name = "SiluAndMulInfinilm"
    overloads = ("input: Tensor, out: Tensor!",)
