import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, HIDDEN, dtype=dtype)
    y = torch.randn(tokens, HIDDEN, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: infini.ops.add(x, y, out),
        lambda: torch.add(x, y, out=out),
        nbytes(x, y, out),
        x.numel(),
    )
