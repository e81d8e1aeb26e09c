"""`scaled_softmax`: ``out = softmax(input * scale, dim=-1)``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from .softmax import SOFTMAX_DTYPES


class ScaledSoftmax(Operator):
    """``out = softmax(input.float() * scale, dim=-1)`` cast back to
    `input`'s dtype.

    - `out` has `input`'s shape and dtype, any strides; a 0-d `input` is one
      element. `scale` may be any float (0 gives a uniform row; a negative
      one reverses the order).
    - float32, float64, float16 and bfloat16; computed in float32 (float64
      for float64, where the original computes in float32), each result
      rounded once.
    - `out` may alias `input` (in place) or overlap it: inputs are read
      first.
    """

    name = "scaled_softmax"
    trace_name = "ScaledSoftmax"
    overloads = ("input: Tensor, scale: float, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        self.require_dtype("input", input, SOFTMAX_DTYPES)
        self.require_same_dtype("input", {"input": input, "out": out})
        self.require_shape("out", out, input.shape, "(the shape of `input`)")
        self.require_writable("out", out)
        self.scale = args.scale
