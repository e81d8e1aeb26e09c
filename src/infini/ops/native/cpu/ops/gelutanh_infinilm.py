"""CPU `gelutanh_infinilm` (slot 0): `gelu`'s tanh kernels."""

from __future__ import annotations

from infini.ops.base.gelutanh_infinilm import GelutanhInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.elementwise import UnaryElementwise
from infini.ops.native.cpu.ops.gelu import gelu_kernels
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


@implementation(operator="gelutanh_infinilm", devices=("cpu",), slot=0)
class CpuGelutanhInfinilm(GelutanhInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = UnaryElementwise(
            args.out, args.input, gelu_kernels(args.out.dtype, "tanh")
        )

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES)
