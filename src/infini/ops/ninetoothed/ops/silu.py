"""NineToothed `silu` (slot 9, NVIDIA): ``out = input * sigmoid(input)``,
the elementwise arrangement of `elementwise.py`; 16-bit floats are computed
in float64 and rounded once."""

from __future__ import annotations

from infini.ops.base.silu import Silu
from infini.ops.core.registry import implementation
from infini.ops.ninetoothed.elementwise import ElementwiseLaunch
from infini.ops.ninetoothed.language import silu, upcast


def application(input, out):
    out = silu(upcast(input))  # noqa: F841 - a store


@implementation(operator="silu", devices=("nvidia",), slot=9)
class NineToothedSilu(Silu):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = ElementwiseLaunch(
            self, "silu", application, args.out, {"input": args.input}
        )
