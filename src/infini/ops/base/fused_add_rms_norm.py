"""`fused_add_rms_norm`: in place, ``residual += input``, then
``input = rms_norm(residual) * weight``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from .rms_norm import RMS_NORM_DTYPES


class FusedAddRmsNorm(Operator):
    """vLLM's `fused_add_rms_norm`, in place on both tensors:
    ``residual = input + residual`` (added in float32, rounded to the
    dtype), then ``input = residual / sqrt(mean(residual^2, -1) + epsilon)
    * weight``, normalising the rounded `residual` and rounding once.

    - `input` and `residual` have one shape ``(..., hidden)``, one dtype
      and any strides (no broadcast dimension: both are written); `weight`
      is 1-D ``(hidden,)`` of any float dtype, or None (no scaling).
    - float32, float64, float16 and bfloat16; accumulates in float32
      (float64 when an operand is float64).
    - Returns None; the results are the updated `input` and `residual`.
    """

    name = "fused_add_rms_norm"
    trace_name = "FusedAddRmsNorm"
    overloads = (
        "input: Tensor!, residual: Tensor!, weight: Tensor|None, epsilon: float",
    )
    defaults = {"weight": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        input, residual, weight = args.input, args.residual, args.weight
        self.require_dtype("input", input, RMS_NORM_DTYPES)
        self.require_same_dtype("input", {"input": input, "residual": residual})
        if input.ndim < 1:
            raise self.error("`input` must have at least 1 dimension, got a scalar.")
        self.require_shape("residual", residual, input.shape, "(the shape of `input`)")
        if weight is not None:
            self.require_dtype("weight", weight, RMS_NORM_DTYPES)
            self.require_ndim("weight", weight, (1,))
            self.require_shape(
                "weight",
                weight,
                input.shape[-1:],
                "to match the last dimension of `input`",
            )
        self.require_writable("input", input)
        self.require_writable("residual", residual)
        self.epsilon = args.epsilon
