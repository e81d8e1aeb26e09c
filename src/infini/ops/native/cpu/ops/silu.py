"""CPU `silu` (slot 0): the shared unary elementwise pass with `silu`."""

from __future__ import annotations

from infini.ops.base.silu import Silu
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.activations import silu
from infini.ops.native.cpu.elementwise import UnaryElementwise, unary_kernels
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


@implementation(operator="silu", devices=("cpu",), slot=0)
class CpuSilu(Silu):
    def __init__(self, args) -> None:
        super().__init__(args)
        dtype = args.out.dtype
        self.launch = UnaryElementwise(
            args.out, args.input, unary_kernels(silu, dtype, dtype, dtype)
        ).launch

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise("silu", PRECOMPILED_DTYPES)
