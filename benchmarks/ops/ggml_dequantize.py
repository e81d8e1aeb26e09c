import torch

import infini.ops
from benchmarks.harness import Case
from benchmarks.ops._ggml import SHAPES, dequantized, label, packed_weight


def cases(tokens, dtype):
    # Dequantisation does not depend on tokens: one point, at decode. The
    # torch side is the nearest eager equivalent: copying the already
    # dequantised weight (a lower bound for any torch dequantisation).
    if tokens != 1 or dtype == torch.float16:
        return
    for rows, cols, quant_type in SHAPES:
        weight = packed_weight(rows, cols, quant_type)
        values = dequantized(weight, quant_type, cols, dtype)
        out = torch.empty_like(values)
        yield Case(
            label(rows, cols, quant_type, 0),
            lambda w=weight, q=quant_type, r=rows, c=cols, o=out: (
                infini.ops.ggml_dequantize(w, q, r, c, o)
            ),
            lambda v=values, o=out: o.copy_(v),
            weight.numel() + out.numel() * out.element_size(),
            out.numel(),
        )
