"""CUDA-like `conv3d` (slot 0) in Triton: the implicit-GEMM convolution
kernel of `native/cuda/convolution.py`."""

from __future__ import annotations

from infini.ops.base.conv3d import Conv3d
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.convolution import ConvolutionLaunch
from infini.ops.runtime.triton import require_device


@implementation(operator="conv3d", devices="cuda_like", slot=0)
class CudaConv3d(Conv3d):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self.plan = ConvolutionLaunch(
            self, args.input, args.weight, args.bias, args.out
        )

    def launch(self, stream, input, weight, bias, out) -> None:
        self.plan(stream, input, weight, bias, out)
