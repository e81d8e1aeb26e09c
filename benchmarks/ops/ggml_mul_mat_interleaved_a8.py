import torch

import infini.ops
from benchmarks.harness import Case
from benchmarks.ops._ggml import SHAPES, dequantized, label, packed_weight

# The products of `ggml_mul_mat_vec_a8`'s benchmark over the same weights
# interleaved (`ggml_interleave`, outside the timing), against torch's
# product with the weight dequantised once outside the timing. The bytes
# reported are the packed weight's: the rate it is read at.


def cases(tokens, dtype):
    if tokens > 16 or dtype == torch.float16:
        return
    for rows, cols, quant_type in SHAPES:
        weight = packed_weight(rows, cols, quant_type)
        values = dequantized(weight, quant_type, cols, dtype)
        interleaved = torch.empty_like(weight)
        infini.ops.ggml_interleave(weight, quant_type, interleaved)
        x = torch.randn(tokens, cols, dtype=dtype)
        out = torch.empty(tokens, rows, dtype=dtype)
        yield Case(
            label(rows, cols, quant_type, tokens),
            lambda w=interleaved, q=quant_type, r=rows, x=x, o=out: (
                infini.ops.ggml_mul_mat_interleaved_a8(w, x, q, r, o)
            ),
            lambda v=values, x=x, o=out: torch.matmul(x, v.T, out=o),
            weight.numel(),
            weight.numel(),
        )
