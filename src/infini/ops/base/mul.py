"""`mul`: ``out = input * other``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._elementwise import check_broadcast_to_output


class Mul(Operator):
    """``out = input * other`` elementwise, with broadcasting.

    Every dtype, including `bool` (where the product is a logical and); all
    three tensors share one dtype. Integer products wrap around as in torch;
    16-bit floats multiply in float32 and round to nearest even. `input` and
    `other` broadcast to `out`'s shape; `out` must not broadcast (no stride-0
    dimension). `out` may alias or overlap `input` or `other`.
    """

    name = "mul"
    trace_name = "Mul"
    overloads = ("input: Tensor, other: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.require_same_dtype(
            "input", {"input": args.input, "other": args.other, "out": args.out}
        )
        check_broadcast_to_output(
            self, "out", args.out, {"input": args.input, "other": args.other}
        )
