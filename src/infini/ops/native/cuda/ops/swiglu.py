"""CUDA-like `swiglu` (slot 0): ``out = input * silu(gate)``, the binary
elementwise template with `swiglu`."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.swiglu import Swiglu
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import BinaryElementwise


@triton.jit
def swiglu(x, gate, unused_scalar):
    return x * (gate / (1.0 + tl.exp(-gate)))


@implementation(operator="swiglu", devices="cuda_like", slot=0)
class CudaSwiglu(Swiglu):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = BinaryElementwise(self, args.out, args.input, args.gate, swiglu)
