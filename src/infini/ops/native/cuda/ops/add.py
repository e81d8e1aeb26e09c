"""CUDA-like `add` (slot 0): ``out = input + alpha * other``, the binary
elementwise template with `add`."""

from __future__ import annotations

import triton

# Triton's interpreter runs a jit function only when its module sees
# `triton.language`.
import triton.language as tl  # noqa: F401

from infini.ops.base.add import Add
from infini.ops.core.dtypes import is_float
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import BinaryElementwise


@triton.jit
def add(x, y, alpha):
    return x + alpha * y


@implementation(operator="add", devices="cuda_like", slot=0)
class CudaAdd(Add):
    def __init__(self, args) -> None:
        super().__init__(args)
        # Integer `alpha` stays an int so that integer arithmetic stays exact.
        alpha = self.alpha if is_float(args.out.dtype) else int(self.alpha)
        self.launch = BinaryElementwise(
            self, args.out, args.input, args.other, add, alpha
        )
