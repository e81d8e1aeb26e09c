"""CUDA-like `gelutanh_infinilm` (slot 0): the unary elementwise template
with `gelu`'s tanh element function (``x * sigmoid(2 y)``, ``y =
sqrt(2 / pi) (x + 0.044715 x^3)``), in float32 (float64 for float64)."""

from __future__ import annotations

from infini.ops.base.gelutanh_infinilm import GelutanhInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import UnaryElementwise
from infini.ops.native.cuda.ops.gelu import gelu_tanh


@implementation(operator="gelutanh_infinilm", devices="cuda_like", slot=0)
class CudaGelutanhInfinilm(GelutanhInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = UnaryElementwise(self, args.out, args.input, gelu_tanh)
