import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {INTERMEDIATE})",
        lambda: infini.ops.silu(x, out),
        lambda: F.silu(x),
        nbytes(x, out),
        x.numel(),
    )
