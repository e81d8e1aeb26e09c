"""`silu`: ``out = input * sigmoid(input)``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._unary import ACTIVATION_DTYPES, check_same_shape_and_dtype


class Silu(Operator):
    """``out = silu(input) = input * sigmoid(input)``, as
    `torch.nn.functional.silu` (computed as ``x / (1 + exp(-x))``).

    - float32, float64, float16 and bfloat16; `input` and `out` share one
      dtype and one shape. 16-bit floats are computed in float32 and
      rounded once (to nearest even).
    - Any strides, stride-0 (broadcast) dimensions of `input` included;
      `out` must not broadcast. Zero-size tensors are allowed.
    - `out` may be `input` itself or overlap it in any way (``x.t()``):
      results are as if `input` were read first.
    """

    name = "silu"
    trace_name = "Silu"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        check_same_shape_and_dtype(self, args, ACTIVATION_DTYPES)
