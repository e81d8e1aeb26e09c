import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype):
    input = torch.empty(tokens, HIDDEN, dtype=dtype)
    out = torch.empty_like(input)
    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: infini.ops.fill(input, 0.5, out),
        lambda: out.fill_(0.5),
        nbytes(out),
        out.numel(),
    )
