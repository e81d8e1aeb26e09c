"""CPU `add` (slot 0)."""

from __future__ import annotations

from infini.ops.base.add import Add
from infini.ops.core.dtypes import is_float
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.elementwise import BinaryElementwise
from infini.ops.native.cpu.jit import helper
from infini.ops.native.cpu.precompile import precompile_binary_elementwise


@helper
def _add(a, b, alpha):
    return a + alpha * b


@implementation(operator="add", devices=("cpu",), slot=0)
class CpuAdd(Add):
    def __init__(self, args) -> None:
        super().__init__(args)
        out = args.out
        # Integer `alpha` stays an int so that int64 arithmetic stays exact.
        alpha = self.alpha if is_float(out.dtype) else int(self.alpha)
        self.launch = BinaryElementwise(
            _add, out, args.input, args.other, alpha, streaming=True
        ).launch

    @classmethod
    def precompile(cls) -> int:
        return precompile_binary_elementwise("add")
