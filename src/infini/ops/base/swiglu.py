"""`swiglu`: ``out = input * silu(gate)``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._elementwise import check_broadcast_to_output

SWIGLU_DTYPES = ("float32", "float64", "float16", "bfloat16")


class Swiglu(Operator):
    """``out = input * silu(gate)``, where ``silu(x) = x * sigmoid(x)``.

    Note that `gate` is the operand passed through SiLU.

    - `input` and `gate` broadcast to `out`'s shape (stride-0 dimensions
      and missing leading dimensions); `out` must not broadcast.
    - Any strides. float32, float64, float16 and bfloat16, one dtype for
      all tensors; 16-bit floats are computed in float32 and rounded once.
    - `out` may alias `input` or `gate` (in place) or overlap them: inputs
      are read first.
    """

    name = "swiglu"
    trace_name = "Swiglu"
    overloads = ("input: Tensor, gate: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, gate, out = args.input, args.gate, args.out
        self.require_dtype("input", input, SWIGLU_DTYPES)
        self.require_same_dtype("input", {"input": input, "gate": gate, "out": out})
        check_broadcast_to_output(self, "out", out, {"input": input, "gate": gate})
