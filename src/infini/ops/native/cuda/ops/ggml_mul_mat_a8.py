"""CUDA-like `ggml_mul_mat_a8` (slot 0) in Triton: the prefill product with
GGML block-quantised weights (kernels in `infini.ops.native.cuda.ggml`).

A first kernel quantises the activations once (int8 codes and a float32
scale per block of 32 values, in a scratch buffer on the caller's stream).
From 9 tokens, each program then computes a (16 to 64 tokens x 64 weight
rows) tile, one weight group (16 or 32 values sharing a scale) per step: the
group's codes are unpacked in registers and multiplied with the activation
codes by `tl.dot` on tensor cores (float16 operands hold the codes exactly,
and the float32 sums of at most 32 products are exact), and the integer
products are scaled by the activation block's and the weight group's scales
(plus the group's offset times the activation codes' sum) into float32
accumulators, rounded once to `out`. Up to 8 tokens the row-streaming kernel
of `ggml_mul_mat_vec_a8` runs instead: both operators compute the same
product. An `out` overlapping `weight` or `x` is computed into a staging
buffer.
"""

from __future__ import annotations

from infini.ops.base.ggml_mul_mat_a8 import GgmlMulMatA8
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.ggml import QuantisedProduct
from infini.ops.runtime.triton import require_device


@implementation(operator="ggml_mul_mat_a8", devices="cuda_like", slot=0)
class CudaGgmlMulMatA8(QuantisedProduct, GgmlMulMatA8):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self.plan_product(args)
