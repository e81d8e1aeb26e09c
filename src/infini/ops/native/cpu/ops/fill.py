"""CPU `fill` (slot 0): the shared fill pass storing one bit pattern.

A float `value` is converted when the operator is built; a tensor `value`
is read on every call: one conversion pass (`cast`'s kernels) turns its
element into `out`'s dtype in a scratch element, whose bits are then
stored everywhere.
"""

from __future__ import annotations

from infini.ops.base.fill import Fill
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.conversions import conversion_kernels
from infini.ops.native.cpu.elementwise import UnaryLaunch
from infini.ops.native.cpu.fill import FillLaunch, bits_of
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


@implementation(operator="fill", devices=("cpu",), slot=0)
class CpuFill(Fill):
    def __init__(self, args) -> None:
        super().__init__(args)
        out = args.out
        self.fill = FillLaunch(out)
        if self.converted is not None:
            self.pattern = bits_of(self.converted)
            self.launch = self._launch_constant
        else:
            import torch

            # One scratch element per operator (operators are cached per
            # thread, so no two threads share it).
            self.scratch = torch.empty((), dtype=getattr(torch, out.dtype))
            self.convert = UnaryLaunch(
                (), (), (), conversion_kernels(args.value.dtype, out.dtype)
            )
            self.launch = self._launch_tensor

    def _launch_constant(self, stream, input, value, out) -> None:
        self.fill(out.data_ptr(), self.pattern)

    def _launch_tensor(self, stream, input, value, out) -> None:
        if self.fill.numel == 0:
            return
        self.convert(self.scratch.data_ptr(), value.data_ptr())
        self.fill(out.data_ptr(), bits_of(self.scratch))

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES, 0.0)
