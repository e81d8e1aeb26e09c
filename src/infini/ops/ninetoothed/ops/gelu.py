"""NineToothed `gelu` (slot 9, NVIDIA): the elementwise arrangement of
`elementwise.py` with exact GELU (``0.5 x erfc(-x / sqrt(2))``) or its tanh
form, computed in float64 and rounded once (`language.gelu_erf`,
`language.gelu_tanh`).

NineToothed renames the application to the kernel by replacing its name
everywhere in the generated text, so an application's name must not occur
in anything it calls."""

from __future__ import annotations

from infini.ops.base.gelu import Gelu
from infini.ops.core.registry import implementation
from infini.ops.ninetoothed.elementwise import ElementwiseLaunch
from infini.ops.ninetoothed.language import gelu_erf, gelu_tanh, upcast


def exact_application(input, out):
    out = gelu_erf(upcast(input))  # noqa: F841 - a store


def tanh_application(input, out):
    out = gelu_tanh(upcast(input))  # noqa: F841 - a store


@implementation(operator="gelu", devices=("nvidia",), slot=9)
class NineToothedGelu(Gelu):
    def __init__(self, args) -> None:
        super().__init__(args)
        name, application = (
            ("gelu_tanh", tanh_application)
            if self.approximate == "tanh"
            else ("gelu", exact_application)
        )
        self.launch = ElementwiseLaunch(
            self, name, application, args.out, {"input": args.input}
        )
