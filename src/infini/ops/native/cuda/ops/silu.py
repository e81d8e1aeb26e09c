"""CUDA-like `silu` (slot 0): ``out = input * sigmoid(input)``, the unary
elementwise template with `silu`."""

from __future__ import annotations

import triton

# Triton's interpreter runs a jit function only when its module sees
# `triton.language`.
import triton.language as tl  # noqa: F401

from infini.ops.base.silu import Silu
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import UnaryElementwise
from infini.ops.native.cuda.special import sigmoid


@triton.jit
def silu(x):
    return x * sigmoid(x)


@implementation(operator="silu", devices="cuda_like", slot=0)
class CudaSilu(Silu):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = UnaryElementwise(self, args.out, args.input, silu)
