"""CUDA-like `silu_and_mul` (slot 0):
``out = silu(input[..., :h]) * input[..., h:]``, the gated elementwise
template with `silu_and_mul`."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import GatedElementwise


@triton.jit
def silu_and_mul(x, y):
    return (x / (1.0 + tl.exp(-x))) * y


@implementation(operator="silu_and_mul", devices="cuda_like", slot=0)
class CudaSiluAndMul(SiluAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = GatedElementwise(self, args.out, args.input, silu_and_mul)
