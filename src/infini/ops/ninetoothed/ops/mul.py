"""NineToothed `mul` (slot 9, NVIDIA): ``out = input * other``, the
elementwise arrangement of `elementwise.py`. Every dtype; 16-bit floats are
computed in float32 and rounded once."""

from __future__ import annotations

from infini.ops.base.mul import Mul
from infini.ops.core.registry import implementation
from infini.ops.ninetoothed.elementwise import ElementwiseLaunch
from infini.ops.ninetoothed.language import upcast


def application(input, other, out):
    out = upcast(input) * upcast(other)  # noqa: F841 - a store


@implementation(operator="mul", devices=("nvidia",), slot=9)
class NineToothedMul(Mul):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = ElementwiseLaunch(
            self,
            "mul",
            application,
            args.out,
            {"input": args.input, "other": args.other},
        )
