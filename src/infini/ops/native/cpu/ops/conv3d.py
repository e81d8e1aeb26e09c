"""CPU `conv3d` (slot 0): im2col and BLAS, a direct depthwise kernel
(see `native/cpu/convolution.py`)."""

from __future__ import annotations

from infini.ops.base.conv3d import Conv3d
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.convolution import ConvolutionPlan, precompile_convolution


@implementation(operator="conv3d", devices=("cpu",), slot=0)
class CpuConv3d(Conv3d):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan = ConvolutionPlan(self, args.input, args.weight, args.bias, args.out)

    def launch(self, stream, input, weight, bias, out) -> None:
        self.plan.run(input, weight, bias, out)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the gather, store and depthwise kernels of each
        precompiled dtype."""
        return precompile_convolution("conv3d", 3)
