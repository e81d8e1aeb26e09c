import torch

import infini.ops
from benchmarks.harness import Case
from benchmarks.ops._ggml import SHAPES, label, packed_weight

# Interleaving runs once per weight at load time. torch's side is the
# nearest eager equivalent: copying the same bytes (a lower bound for any
# rearrangement of them).


def cases(tokens, dtype):
    if tokens != 1 or dtype != torch.float32:
        return
    for rows, cols, quant_type in SHAPES:
        weight = packed_weight(rows, cols, quant_type)
        out = torch.empty_like(weight)
        yield Case(
            label(rows, cols, quant_type, 0),
            lambda w=weight, q=quant_type, o=out: infini.ops.ggml_interleave(w, q, o),
            lambda w=weight, o=out: o.copy_(w),
            2 * weight.numel(),
            weight.numel(),
        )
