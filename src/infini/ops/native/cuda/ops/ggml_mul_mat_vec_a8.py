"""CUDA-like `ggml_mul_mat_vec_a8` (slot 0) in Triton: the decode-time product
with GGML block-quantised weights (kernels in `infini.ops.native.cuda.ggml`).

A first kernel quantises the activations once (int8 codes and a float32
scale per block of 32 values, in a scratch buffer on the caller's stream).
Up to 8 tokens, one program per 4 or 8 weight rows then streams the rows'
blocks once, 512 values per row and step: the per-type group helper unpacks
the codes in registers, each token's codes meet them in exact integer dot
products per group (16 or 32 values), scaled by the group's and the
activation block's scales into float32 sums, rounded once to `out`. From 9
tokens the tiled tensor-core kernel of `ggml_mul_mat_a8` runs instead: both
operators compute the same product. An `out` overlapping `weight` or `x` is
computed into a staging buffer.
"""

from __future__ import annotations

from infini.ops.base.ggml_mul_mat_vec_a8 import GgmlMulMatVecA8
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.ggml import QuantisedProduct
from infini.ops.runtime.triton import require_device


@implementation(operator="ggml_mul_mat_vec_a8", devices="cuda_like", slot=0)
class CudaGgmlMulMatVecA8(QuantisedProduct, GgmlMulMatVecA8):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self.plan_product(args)
