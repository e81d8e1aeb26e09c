"""`rms_norm`: ``out = input / sqrt(mean(input^2, -1) + eps) * weight``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

RMS_NORM_DTYPES = ("float32", "float64", "float16", "bfloat16")


class RmsNorm(Operator):
    """``out = input / sqrt(mean(input^2, dim=-1) + eps) * weight``.

    - `input` and `out` have one shape ``(..., hidden)`` (any number of
      leading dimensions, any strides); `weight` is 1-D ``(hidden,)``.
    - `eps` defaults to 1e-6 (the overload without it).
    - float32, float64, float16 and bfloat16. `input` and `out` share a
      dtype; `weight` may have another float dtype. Accumulates in float32
      (float64 for float64 inputs) and rounds once.
    - `out` may alias `input` (in place) or overlap it: inputs are read first.
    """

    name = "rms_norm"
    trace_name = "RmsNorm"
    overloads = (
        "input: Tensor, weight: Tensor, eps: float, out: Tensor!",
        "input: Tensor, weight: Tensor, out: Tensor!",
    )
    defaults = {"eps": 1e-6}

    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        self.require_dtype("input", input, RMS_NORM_DTYPES)
        self.require_dtype("weight", weight, RMS_NORM_DTYPES)
        self.require_same_dtype("input", {"input": input, "out": out})
        if input.ndim < 1:
            raise self.error("`input` must have at least 1 dimension, got a scalar.")
        self.require_ndim("weight", weight, (1,))
        self.require_shape(
            "weight", weight, input.shape[-1:], "to match the last dimension of `input`"
        )
        self.require_shape("out", out, input.shape, "(the shape of `input`)")
        self.require_writable("out", out)
        self.eps = args.eps
