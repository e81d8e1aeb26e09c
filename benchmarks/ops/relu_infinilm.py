import torch

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {INTERMEDIATE})",
        lambda: infini.ops.relu_infinilm(x, out),
        lambda: torch.clamp_min(x, 0, out=out),
        nbytes(x, out),
        x.numel(),
    )
