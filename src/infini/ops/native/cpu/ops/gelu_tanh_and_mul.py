"""CPU `gelu_tanh_and_mul` (slot 0): the shared gated elementwise kernel over
the two halves of `input`, with `gelu`'s tanh GELU."""

from __future__ import annotations

from infini.ops.base.gelu_tanh_and_mul import GeluTanhAndMul
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.activations import (
    gelu_tanh_and_mul_combine_float32,
    gelu_tanh_and_mul_combine_float64,
)
from infini.ops.native.cpu.elementwise import GatedElementwise
from infini.ops.native.cpu.precompile import precompile_gated_elementwise


@implementation(operator="gelu_tanh_and_mul", devices=("cpu",), slot=0)
class CpuGeluTanhAndMul(GeluTanhAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        out = args.out
        combine = (
            gelu_tanh_and_mul_combine_float64
            if out.dtype == "float64"
            else gelu_tanh_and_mul_combine_float32
        )
        self.launch = GatedElementwise(combine, out, args.input)
        self.bind_launch = self.launch.bind

    @classmethod
    def precompile(cls) -> int:
        return precompile_gated_elementwise(cls.name)
