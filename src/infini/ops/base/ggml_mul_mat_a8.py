"""`ggml_mul_mat_a8`: a product with GGML block-quantised weights for many
tokens (prefill), activations quantised to 8 bits."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._ggml import check_quantised_product


class GgmlMulMatA8(Operator):
    """``out = x @ dequantize(weight)[:row].T`` with `x` quantised to 8 bits
    per block of 32 values first: the prefill (many tokens) form of
    `ggml_mul_mat_vec_a8`, with the same arguments, checks and results.

    - Follows vLLM's ``ggml_mul_mat_a8(W, X, quant_type, row)`` with the
      result written into the caller's `out` (not in the catalog).
    - `weight`, `x`, `quant_type`, `row` and `out` are as documented for
      `ggml_mul_mat_vec_a8`, including the activation quantisation (as
      llama.cpp's Q8_1: ``d = absmax / 127`` per block of 32 values, codes
      ``round(x / d)`` with halves away from zero, block sums for the
      formats with a minimum) and the exact integer dot products per block.
    - The result is the exact product of the quantised activations with the
      dequantised weight up to float32 rounding, however it is computed: the
      CPU implementation takes the integer kernels of `ggml_mul_mat_vec_a8`
      for few tokens and, from 16 tokens, float32 BLAS over cache-sized
      panels of weight rows dequantised on the fly (never a full float32
      copy of the weight).
    """

    name = "ggml_mul_mat_a8"
    trace_name = "GgmlMulMatA8"
    overloads = ("weight: Tensor, x: Tensor, quant_type: int, row: int, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.type, self.tokens, self.cols = check_quantised_product(self, args)
        self.rows = args.row
