"""CPU `swiglu` (slot 0): the shared elementwise kernel with a SiLU combine."""

from __future__ import annotations

from infini.ops.base.swiglu import Swiglu
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.activations import swiglu_combine
from infini.ops.native.cpu.elementwise import BinaryElementwise
from infini.ops.native.cpu.precompile import binary_layouts, torch_dtypes


@implementation(operator="swiglu", devices=("cpu",), slot=0)
class CpuSwiglu(Swiglu):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = BinaryElementwise(
            swiglu_combine, args.out, args.input, args.gate, 0.0
        ).launch

    @classmethod
    def precompile(cls) -> int:
        """Compiles the flat and strided kernels, serial and parallel."""
        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for input, gate, out in binary_layouts(dtype):
                infini.ops.swiglu(input, gate, out, implementation_index=0)
                calls += 1
        return calls
