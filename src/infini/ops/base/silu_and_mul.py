"""`silu_and_mul`: ``out = silu(input[..., :h]) * input[..., h:]``."""

from __future__ import annotations

from infini.ops.base._elementwise import check_gated_halves
from infini.ops.core.operator import Operator

SILU_AND_MUL_DTYPES = ("float32", "float64", "float16", "bfloat16")


class SiluAndMul(Operator):
    """``out = silu(input[..., :h]) * input[..., h:]`` with ``h`` half the
    last dimension of `input` (vLLM's `silu_and_mul`).

    - `input` is ``(..., 2 * h)``, at least 1-D, with an even last
      dimension; `out` is ``(..., h)``. Any strides; `out` must not have
      stride-0 dimensions.
    - float32, float64, float16 and bfloat16, one dtype for both tensors;
      16-bit floats are computed in float32 and rounded once.
    - `out` may overlap `input` (e.g. be its first half): inputs are read
      first.
    """

    name = "silu_and_mul"
    trace_name = "SiluAndMul"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.half = check_gated_halves(self, args, SILU_AND_MUL_DTYPES)
