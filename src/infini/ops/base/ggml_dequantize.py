"""`ggml_dequantize`: unpack GGML block-quantised weights (GGUF files) into
floats."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._ggml import FLOAT_DTYPES, check_cols, check_quant_type, check_weight


class GgmlDequantize(Operator):
    """``out[i, :] = dequantize(weight[i, :])`` for the first `m` rows of
    `weight`, each holding `n` values in blocks of GGML type `quant_type`
    (the layouts are described in `infini.ops.base._ggml`).

    - Follows vLLM's ``ggml_dequantize(W, quant_type, m, n, dtype)`` with
      the result written into the caller's `out` instead of returned (the
      catalog has no entry: the name and argument order are vLLM's).
    - `weight` is uint8 ``(rows_w, n / block_elements * block_bytes)`` with
      ``rows_w >= m`` and adjacent bytes within a row (rows may be strided).
    - `quant_type` is a GGML type code: Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7,
      Q8_0=8, Q2_K=10, Q3_K=11, Q4_K=12, Q5_K=13, Q6_K=14; others raise.
    - `n` is a positive multiple of the type's block (32 or 256 values).
    - `out` is ``(m, n)`` float32, float16 or bfloat16 with adjacent elements
      within a row. Each value is computed in float32 as llama.cpp's
      reference dequantisation does (``d * q + m`` and the like, with no
      fused multiply-add) and rounded once to `out`'s dtype, so float32
      results equal `gguf.quants.dequantize` bit for bit.
    """

    name = "ggml_dequantize"
    trace_name = "GgmlDequantize"
    overloads = ("weight: Tensor, quant_type: int, m: int, n: int, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        weight, out = args.weight, args.out
        self.type = check_quant_type(self, args.quant_type)
        rows, cols = args.m, args.n
        check_cols(self, self.type, "`n`", cols)
        check_weight(self, weight, self.type, cols, rows, "m")
        self.require_dtype("out", out, FLOAT_DTYPES)
        self.require_shape("out", out, (rows, cols), "(m, n)")
        if cols > 1 and out.strides[1] != 1:
            raise self.error(
                f"`out` must have adjacent elements within each row (stride 1), "
                f"got strides {out.strides}."
            )
        self.require_writable("out", out)
        self.rows = rows
        self.cols = cols
