"""CPU `convolution` (slot 0): im2col and BLAS, a direct depthwise kernel
(see `native/cpu/convolution.py`)."""

from __future__ import annotations

from infini.ops.base.convolution import Convolution
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.convolution import ConvolutionPlan, precompile_convolution


@implementation(operator="convolution", devices=("cpu",), slot=0)
class CpuConvolution(Convolution):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan = ConvolutionPlan(self, args.input, args.weight, args.bias, args.out)

    def launch(self, stream, input, weight, bias, out) -> None:
        self.plan.run(input, weight, bias, out)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the gather, store and depthwise kernels of each
        precompiled dtype, and the transposed scatter kernel."""
        return precompile_convolution("convolution", 2)
