"""CPU `silu_and_mul` (slot 0): the shared gated elementwise kernel over the
two halves of `input`."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.activations import silu_and_mul_combine
from infini.ops.native.cpu.elementwise import GatedElementwise
from infini.ops.native.cpu.precompile import precompile_gated_elementwise


@implementation(operator="silu_and_mul", devices=("cpu",), slot=0)
class CpuSiluAndMul(SiluAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = GatedElementwise(silu_and_mul_combine, args.out, args.input)
        self.bind_launch = self.launch.bind

    @classmethod
    def precompile(cls) -> int:
        return precompile_gated_elementwise(cls.name)
