"""CPU `sigmoid` (slot 0): the shared unary elementwise pass with `sigmoid`."""

from __future__ import annotations

from infini.ops.base.sigmoid import Sigmoid
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.activations import sigmoid
from infini.ops.native.cpu.elementwise import UnaryElementwise, unary_kernels
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


@implementation(operator="sigmoid", devices=("cpu",), slot=0)
class CpuSigmoid(Sigmoid):
    def __init__(self, args) -> None:
        super().__init__(args)
        dtype = args.out.dtype
        self.launch = UnaryElementwise(
            args.out, args.input, unary_kernels(sigmoid, dtype, dtype, dtype)
        ).launch

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES)
