import torch

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {INTERMEDIATE})",
        lambda: infini.ops.relu(x, out),
        # `relu` has no `out=` form; `clamp_min` is the same kernel family.
        lambda: torch.clamp_min(x, 0, out=out),
        nbytes(x, out),
        x.numel(),
    )
