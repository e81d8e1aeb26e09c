import torch

import infini.ops
from benchmarks.harness import Case
from benchmarks.ops._ggml import SHAPES, dequantized, label, packed_weight

# Ours against torch's product with the weight dequantised once outside the
# timing (the fastest torch formulation; it reads 4 to 8 times the bytes).
# The bytes reported are the packed weight's: the rate it is read at.


def cases(tokens, dtype):
    # Prefill: 16 to 512 tokens (2048 would take minutes on a small CPU); the
    # output head up to 64 tokens. From 16 tokens the CPU product is float32
    # BLAS over dequantised panels of the weight, so torch's float32 product
    # on the already dequantised weight is its bound. torch's float16 CPU
    # product is too slow to time at these sizes.
    if tokens == 1 or tokens > 512 or dtype == torch.float16:
        return
    for rows, cols, quant_type in SHAPES:
        if tokens > 64 and rows > 4096:
            continue
        weight = packed_weight(rows, cols, quant_type)
        values = dequantized(weight, quant_type, cols, dtype)
        x = torch.randn(tokens, cols, dtype=dtype)
        out = torch.empty(tokens, rows, dtype=dtype)
        yield Case(
            label(rows, cols, quant_type, tokens),
            lambda w=weight, q=quant_type, r=rows, x=x, o=out: (
                infini.ops.ggml_mul_mat_a8(w, x, q, r, o)
            ),
            lambda v=values, x=x, o=out: torch.matmul(x, v.T, out=o),
            weight.numel(),
            weight.numel(),
        )
