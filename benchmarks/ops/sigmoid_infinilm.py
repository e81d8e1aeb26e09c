import torch

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {INTERMEDIATE})",
        lambda: infini.ops.sigmoid_infinilm(x, out),
        lambda: torch.sigmoid(x, out=out),
        nbytes(x, out),
        x.numel(),
    )
