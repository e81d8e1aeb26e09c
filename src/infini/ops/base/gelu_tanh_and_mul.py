"""`gelu_tanh_and_mul`: ``out = gelu_tanh(input[..., :h]) * input[..., h:]``."""

from __future__ import annotations

from infini.ops.base._elementwise import check_gated_halves
from infini.ops.core.operator import Operator

GELU_TANH_AND_MUL_DTYPES = ("float32", "float64", "float16", "bfloat16")


class GeluTanhAndMul(Operator):
    """The GELU-gated product of vLLM's `gelu_tanh_and_mul` (Gemma's FFN):
    ``out = gelu_tanh(input[..., :h]) * input[..., h:]`` with ``h`` half the
    last dimension of `input` and ``gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 /
    pi) (x + 0.044715 x^3)))``.

    - vLLM's operator takes ``(out, input)``; here `out` comes last, as for
      every operator of this library (`silu_and_mul` likewise).
    - `input` is ``(..., 2 * h)``, at least 1-D, with an even last
      dimension; `out` is ``(..., h)``. Any strides; `out` must not have
      stride-0 dimensions.
    - float32, float64, float16 and bfloat16, one dtype for both tensors;
      16-bit floats are computed in float32 and rounded once.
    - `out` may overlap `input` (e.g. be its first half): inputs are read
      first.
    """

    name = "gelu_tanh_and_mul"
    trace_name = "GeluTanhAndMul"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.half = check_gated_halves(self, args, GELU_TANH_AND_MUL_DTYPES)
