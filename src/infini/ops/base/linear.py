"""`linear`: ``out = input @ weight.T + bias``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

LINEAR_DTYPES = ("float32", "float64", "float16", "bfloat16")


class Linear(Operator):
    """``out = input @ weight.T (+ bias)``, as `torch.nn.functional.linear`.

    - `input` is ``(..., in_features)`` with any number (>= 0) of leading
      dimensions; `weight` is ``(out_features, in_features)``; `bias` is
      `None` or ``(out_features,)``; `out` is ``(..., out_features)``.
    - Any strides; `weight` is read in place whatever its layout.
    - float32, float64, float16 and bfloat16, one dtype for all tensors.
      16-bit floats are computed in float32 (product and bias) and rounded
      once, as the reference does. Slot 8 is ATen's `linear.out` as it is:
      with a 2-D `input` it rounds once too, but with a 1-D or an
      ``N >= 3``-D `input` and a `bias` it rounds the product to the 16-bit
      dtype before adding the bias, then rounds again (docs/behaviour.md,
      "ATen backend").
    - `out` may alias or overlap the inputs: they are read first.
    """

    name = "linear"
    trace_name = "Linear"
    overloads = ("input: Tensor, weight: Tensor, bias: Tensor|None, out: Tensor!",)
    defaults = {"bias": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, bias, out = args.input, args.weight, args.bias, args.out
        self.require_dtype("input", input, LINEAR_DTYPES)
        self.require_same_dtype(
            "input", {"input": input, "weight": weight, "bias": bias, "out": out}
        )
        if input.ndim < 1:
            raise self.error("`input` must have at least 1 dimension, got a scalar.")
        self.require_ndim("weight", weight, (2,))
        out_features, in_features = weight.shape
        if input.shape[-1] != in_features:
            raise self.error(
                f"the last dimension of `input` {input.shape} must equal "
                f"`in_features` = {in_features} of `weight` {weight.shape}."
            )
        if bias is not None:
            self.require_shape(
                "bias", bias, (out_features,), "to match `out_features` of `weight`"
            )
        self.require_shape(
            "out", out, input.shape[:-1] + (out_features,), "(`input` @ `weight`.T)"
        )
        self.require_writable("out", out)
