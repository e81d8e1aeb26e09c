"""CUDA-like `mul` (slot 0): ``out = input * other``, the binary elementwise
template with `mul`."""

from __future__ import annotations

import triton

# Triton's interpreter runs a jit function only when its module sees
# `triton.language`.
import triton.language as tl  # noqa: F401

from infini.ops.base.mul import Mul
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import BinaryElementwise


@triton.jit
def mul(x, y, unused_scalar):
    return x * y


@implementation(operator="mul", devices="cuda_like", slot=0)
class CudaMul(Mul):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = BinaryElementwise(self, args.out, args.input, args.other, mul)
