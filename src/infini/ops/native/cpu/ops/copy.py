"""CPU `copy` (slot 0): `cast`'s conversion kernels through the shared unary
elementwise pass, `src` broadcast to `out`."""

from __future__ import annotations

from infini.ops.base.copy import Copy
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.conversions import conversion_kernels
from infini.ops.native.cpu.elementwise import UnaryElementwise
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


@implementation(operator="copy", devices=("cpu",), slot=0)
class CpuCopy(Copy):
    def __init__(self, args) -> None:
        super().__init__(args)
        src, out = args.src, args.out
        self.launch = UnaryElementwise(
            out,
            src,
            conversion_kernels(src.dtype, out.dtype),
            # Bit copies only: conversions store one element at a time
            # when streamed, slower than their vectorised stores.
            streaming=src.dtype == out.dtype,
        ).launch

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES, False)
