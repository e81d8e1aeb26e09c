"""NineToothed `add` (slot 9, NVIDIA): ``out = input + alpha * other``, the
elementwise arrangement of `elementwise.py`. Every dtype; 16-bit floats are
computed in float32 and rounded once."""

from __future__ import annotations

from infini.ops.base.add import Add
from infini.ops.core.dtypes import is_float
from infini.ops.core.registry import implementation
from infini.ops.ninetoothed.elementwise import ElementwiseLaunch
from infini.ops.ninetoothed.language import upcast


def application(input, other, alpha, out):
    out = upcast(input) + alpha * upcast(other)  # noqa: F841 - a store


@implementation(operator="add", devices=("nvidia",), slot=9)
class NineToothedAdd(Add):
    def __init__(self, args) -> None:
        super().__init__(args)
        # Integer `alpha` stays an int so that integer arithmetic stays exact.
        alpha = self.alpha if is_float(args.out.dtype) else int(self.alpha)
        self.launch = ElementwiseLaunch(
            self,
            "add",
            application,
            args.out,
            {"input": args.input, "other": args.other},
            {"alpha": alpha},
        )
