"""CPU `rearrange_infinilm` (slot 0): a bit copy through the shared unary
elementwise pass (`input` broadcast to `out`, walked along `out`'s
smallest stride)."""

from __future__ import annotations

from infini.ops.base.rearrange_infinilm import RearrangeInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.conversions import copy_kernels
from infini.ops.native.cpu.elementwise import UnaryElementwise
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


@implementation(operator="rearrange_infinilm", devices=("cpu",), slot=0)
class CpuRearrangeInfinilm(RearrangeInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        out = args.out
        self.launch = UnaryElementwise(
            out, args.input, copy_kernels(out.element_size), streaming=True
        )

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES)
