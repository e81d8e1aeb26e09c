"""`ggml_mul_mat_vec_a8`: a product with GGML block-quantised weights for
one or a few tokens (decoding), activations quantised to 8 bits."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._ggml import check_quantised_product


class GgmlMulMatVecA8(Operator):
    """``out = x @ dequantize(weight)[:row].T`` with `x` quantised to 8 bits
    per block of 32 values first: the decode-time (few tokens) form of
    `ggml_mul_mat_a8`.

    - Follows vLLM's ``ggml_mul_mat_vec_a8(W, X, quant_type, row)`` with the
      result written into the caller's `out` (not in the catalog: the name
      and argument order are vLLM's).
    - `weight` is uint8 ``(rows_w, cols / block_elements * block_bytes)``:
      row ``i`` holds output feature ``i``'s `cols` weights in GGML blocks
      of type `quant_type` (Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8, Q2_K=10,
      Q3_K=11, Q4_K=12, Q5_K=13, Q6_K=14; layouts in
      `infini.ops.base._ggml`), with adjacent bytes within a row.
    - `x` is ``(tokens, cols)`` float32, float16 or bfloat16, `cols` a
      multiple of the type's block; `out` is ``(tokens, row)`` of `x`'s dtype
      with ``0 <= row <= rows_w``; both with adjacent elements within a row.
    - Activations are quantised as llama.cpp's Q8_1 (and vLLM's kernels)
      do: each block of 32 values of a row of `x` gets the float32 scale
      ``d = absmax / 127`` and the int8 codes ``q = round(x / d)`` (float32
      division, halves rounded away from zero; codes 0 where ``d`` is 0),
      plus the block sum ``d * sum(q)`` (and sums per 16 codes) used by the
      formats with a minimum or an offset. Each weight block meets the codes
      in exact integer dot products, scaled by both blocks' float32 factors
      and summed in float32: the result is the product of the dequantised
      weight with the quantised activations ``d * q`` up to float32
      rounding; the quantisation moves each activation by at most ``d / 2``.
      Non-finite activations give non-finite (unspecified) results.
    - A result is rounded once to `out`'s dtype.
    """

    name = "ggml_mul_mat_vec_a8"
    trace_name = "GgmlMulMatVecA8"
    overloads = ("weight: Tensor, x: Tensor, quant_type: int, row: int, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.type, self.tokens, self.cols = check_quantised_product(self, args)
        self.rows = args.row
