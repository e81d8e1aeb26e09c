"""NineToothed `swiglu` (slot 9, NVIDIA): ``out = input * silu(gate)``, the
elementwise arrangement of `elementwise.py`; 16-bit floats are computed in
float32 and rounded once."""

from __future__ import annotations

import ninetoothed.language as ntl

from infini.ops.base.swiglu import Swiglu
from infini.ops.core.registry import implementation
from infini.ops.ninetoothed.elementwise import ElementwiseLaunch
from infini.ops.ninetoothed.language import upcast


def application(input, gate, out):
    g = upcast(gate)
    out = upcast(input) * (g / (1.0 + ntl.exp(-g)))  # noqa: F841 - a store


@implementation(operator="swiglu", devices=("nvidia",), slot=9)
class NineToothedSwiglu(Swiglu):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = ElementwiseLaunch(
            self,
            "swiglu",
            application,
            args.out,
            {"input": args.input, "gate": args.gate},
        )
