"""CUDA-like `relu` (slot 0): the unary elementwise template with `relu` on
the elements as stored."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.relu import Relu
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import UnaryElementwise


@triton.jit
def relu(x):
    # A select, not arithmetic: `-0.0` and NaNs (payloads included) pass
    # through bit for bit, as in torch. 16-bit floats are tested on their
    # bits (sign set, magnitude in (0, inf]), exact on GPUs and under the
    # interpreter alike.
    if x.dtype == tl.bfloat16:
        bits = x.to(tl.int16, bitcast=True)
        magnitude = bits & 0x7FFF
        negative = (bits < 0) & (magnitude != 0) & (magnitude <= 0x7F80)
    elif x.dtype == tl.float16:
        bits = x.to(tl.int16, bitcast=True)
        magnitude = bits & 0x7FFF
        negative = (bits < 0) & (magnitude != 0) & (magnitude <= 0x7C00)
    else:
        negative = x < 0
    return tl.where(negative, tl.zeros_like(x), x)


@implementation(operator="relu", devices="cuda_like", slot=0)
class CudaRelu(Relu):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = UnaryElementwise(self, args.out, args.input, relu, as_stored=True)
