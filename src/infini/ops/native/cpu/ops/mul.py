"""CPU `mul` (slot 0)."""

from __future__ import annotations

from infini.ops.base.mul import Mul
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.elementwise import BinaryElementwise
from infini.ops.native.cpu.jit import helper
from infini.ops.native.cpu.precompile import precompile_binary_elementwise


@helper
def _mul(a, b, scalar):
    return a * b


@implementation(operator="mul", devices=("cpu",), slot=0)
class CpuMul(Mul):
    def __init__(self, args) -> None:
        super().__init__(args)
        # Products of 16-bit floats are exact in float32, so rounding the
        # float32 product once gives the correctly rounded result, as torch.
        self.launch = BinaryElementwise(
            _mul, args.out, args.input, args.other, 0, streaming=True
        ).launch

    @classmethod
    def precompile(cls) -> int:
        return precompile_binary_elementwise("mul")
