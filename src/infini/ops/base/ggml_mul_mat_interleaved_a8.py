"""`ggml_mul_mat_interleaved_a8`: `ggml_mul_mat_a8` over a weight in the
interleaved layout of `ggml_interleave`."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._ggml import check_quantised_product
from .ggml_interleave import check_interleaved_type, check_tiles


class GgmlMulMatInterleavedA8(Operator):
    """``out = x @ dequantize(weight)[:row].T`` with `weight` interleaved
    (`ggml_interleave`) and `x` quantised to 8 bits per block of 32 values,
    for any number of tokens: the same product as `ggml_mul_mat_vec_a8` and
    `ggml_mul_mat_a8` on the weight before it was interleaved, the same
    activation quantisation and the same error bound (their documentation
    gives them). An extension of this library (no catalog or vLLM entry).

    - `weight` is contiguous uint8 ``(rows_w, cols / block_elements *
      block_bytes)`` with `rows_w` a multiple of 8 and ``0 <= row <=
      rows_w``; `quant_type` is Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8,
      Q4_K=12 or Q6_K=14.
    - `x` is ``(tokens, cols)`` float32, float16 or bfloat16; `out` is
      ``(tokens, row)`` of `x`'s dtype; both with adjacent elements within a
      row. A result is rounded once to `out`'s dtype.
    """

    name = "ggml_mul_mat_interleaved_a8"
    trace_name = "GgmlMulMatInterleavedA8"
    overloads = ("weight: Tensor, x: Tensor, quant_type: int, row: int, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        check_interleaved_type(self, args.quant_type)
        self.type, self.tokens, self.cols = check_quantised_product(self, args)
        check_tiles(self, "weight", args.weight, self.type)
        self.rows = args.row
