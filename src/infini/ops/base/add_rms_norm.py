"""`add_rms_norm`: ``residual_out = input + residual``, then
``out = rms_norm(residual_out) * weight``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from .rms_norm import RMS_NORM_DTYPES

DEFAULT_EPS = 1e-6


class AddRmsNorm(Operator):
    """``residual_out = input + residual`` (computed in float32 and rounded
    to the dtype), then ``out = rms_norm(input + residual, eps) * weight``,
    normalising the unrounded float32 sum (vLLM's fused residual add).

    - `input`, `residual`, `out` and `residual_out` have one shape
      ``(..., hidden)`` (any strides; `input` and `residual` may broadcast)
      and one dtype; `weight` is 1-D ``(hidden,)`` of any float dtype.
    - `eps` of None, or the overload without it, means 1e-6.
    - float32, float64, float16 and bfloat16; accumulates in float32
      (float64 when an operand is float64).
    - The outputs may alias the inputs element for element (in place);
      other overlaps are staged so that inputs are read first.
    - The original's constructor overloads differ from its call overloads;
      here the class takes the call overloads (`AddRmsNorm(input, residual,
      weight, eps, out, residual_out)` and the one without `eps`).
    """

    name = "add_rms_norm"
    trace_name = "AddRmsNorm"
    overloads = (
        "input: Tensor, residual: Tensor, weight: Tensor, eps: float|None, "
        "out: Tensor!, residual_out: Tensor!",
        "input: Tensor, residual: Tensor, weight: Tensor, out: Tensor!, "
        "residual_out: Tensor!",
    )
    defaults = {"eps": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        input, residual, weight = args.input, args.residual, args.weight
        out, residual_out = args.out, args.residual_out
        self.require_dtype("input", input, RMS_NORM_DTYPES)
        self.require_dtype("weight", weight, RMS_NORM_DTYPES)
        self.require_same_dtype(
            "input",
            {
                "input": input,
                "residual": residual,
                "out": out,
                "residual_out": residual_out,
            },
        )
        if input.ndim < 1:
            raise self.error("`input` must have at least 1 dimension, got a scalar.")
        shape = tuple(input.shape)
        for name, meta in (
            ("residual", residual),
            ("out", out),
            ("residual_out", residual_out),
        ):
            self.require_shape(name, meta, shape, "(the shape of `input`)")
        self.require_ndim("weight", weight, (1,))
        self.require_shape(
            "weight", weight, shape[-1:], "to match the last dimension of `input`"
        )
        self.require_writable("out", out)
        self.require_writable("residual_out", residual_out)
        self.eps = DEFAULT_EPS if args.eps is None else args.eps
