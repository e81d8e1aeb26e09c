import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes

TOPK = 8


def cases(tokens, dtype):
    x = torch.randn(tokens, TOPK, HIDDEN, dtype=dtype)
    out = torch.empty(tokens, HIDDEN, dtype=dtype)
    yield Case(
        f"({tokens}, {TOPK}, {HIDDEN})",
        lambda: infini.ops.moe_sum(x, out),
        lambda: torch.sum(x, dim=1, out=out),
        nbytes(x, out),
        x.numel(),
    )
