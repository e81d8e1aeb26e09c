"""CUDA-like `gelu_tanh_and_mul` (slot 0):
``out = gelu_tanh(input[..., :h]) * input[..., h:]``.

The kernels of `silu_and_mul` (`native/cuda/ops/silu_and_mul.py`: the row
kernel when the last dimensions are contiguous, else the gated elementwise
template) with `gelu`'s tanh GELU as the gate: float32 arithmetic (float64
for float64) with the GELU's argument computed in float64 and rounded once,
the result rounded once on the store.
"""

from __future__ import annotations

import triton

# Triton's interpreter requires `triton.language` in the globals of every
# jit function, used or not.
import triton.language as tl  # noqa: F401

from infini.ops.base.gelu_tanh_and_mul import GeluTanhAndMul
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import GatedElementwise

# The module, not only the class: planning finds its helpers there (the
# sm_90 checks patch `require_device` on it).
from infini.ops.native.cuda.ops import silu_and_mul
from infini.ops.native.cuda.ops.gelu import gelu_tanh


@triton.jit
def gelu_tanh_and_mul(x, y):
    return gelu_tanh(x) * y


@implementation(operator="gelu_tanh_and_mul", devices="cuda_like", slot=0)
class CudaGeluTanhAndMul(GeluTanhAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        if input.strides[-1] == 1 and out.strides[-1] == 1:
            self.launch = silu_and_mul.GatedRows(self, out, input, gelu_tanh_and_mul)
        else:
            self.launch = GatedElementwise(self, out, input, gelu_tanh_and_mul)
