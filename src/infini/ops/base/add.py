"""`add`: ``out = input + alpha * other``."""

from __future__ import annotations

from infini.ops.core.dtypes import is_integer
from infini.ops.core.operator import Operator

from ._elementwise import check_broadcast_to_output


class Add(Operator):
    """``out = input + alpha * other`` with broadcasting; `alpha` defaults to 1.

    Every dtype; integer dtypes need an integral `alpha`. `input` and `other`
    broadcast to `out`'s shape; `out` must not broadcast (no stride-0
    dimension). `out` may alias `input` or `other`.
    """

    name = "add"
    trace_name = "Add"
    overloads = (
        "input: Tensor, other: Tensor, alpha: float, out: Tensor!",
        "input: Tensor, other: Tensor, out: Tensor!",
    )
    defaults = {"alpha": 1.0}

    def __init__(self, args) -> None:
        super().__init__(args)
        self.require_same_dtype(
            "input", {"input": args.input, "other": args.other, "out": args.out}
        )
        check_broadcast_to_output(
            self, "out", args.out, {"input": args.input, "other": args.other}
        )
        if is_integer(args.out.dtype) and args.alpha != int(args.alpha):
            raise self.error(
                f"`alpha` must be integral for integer dtype {args.out.dtype}, "
                f"got {args.alpha}."
            )
        self.alpha = args.alpha
