import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype):
    input = torch.empty(tokens, HIDDEN, dtype=dtype)
    out = torch.empty_like(input)
    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: infini.ops.zeros_infinilm(input, out),
        lambda: out.zero_(),
        nbytes(out),
        out.numel(),
    )
