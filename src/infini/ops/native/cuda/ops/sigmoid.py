"""CUDA-like `sigmoid` (slot 0): ``out = 1 / (1 + exp(-input))``, the unary
elementwise template with `special.sigmoid`."""

from __future__ import annotations

from infini.ops.base.sigmoid import Sigmoid
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import UnaryElementwise
from infini.ops.native.cuda.special import sigmoid


@implementation(operator="sigmoid", devices="cuda_like", slot=0)
class CudaSigmoid(Sigmoid):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = UnaryElementwise(self, args.out, args.input, sigmoid)
