"""CUDA-like `ggml_mul_mat_vec_a8` (slot 0) in Triton: the decode-time product
with GGML block-quantised weights (kernels in `infini.ops.native.cuda.ggml`).

Up to 8 tokens (`VECTOR_MAX_TOKENS`), one program per tile of 4 to 16 weight
rows streams the rows' blocks once: per step it dequantises a (rows x 256 or
512 values) tile in registers (the per-type group helpers) and, for each
token, quantises that stretch of the activations per block of 32 values (int8
codes, ``d = absmax / 127``) and adds the tile's products with ``d * q`` to the
rows' float32 sums. From 9 tokens the activations are quantised once and the
tiled tensor-core kernel of `ggml_mul_mat_a8` runs: both operators compute the
same product, whatever the number of tokens. An `out` overlapping `weight` or
`x` is computed into a staging buffer.
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
