import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype):
    src = torch.randn(tokens, HIDDEN, dtype=dtype)
    out = torch.empty_like(src)
    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: infini.ops.copy(src, False, out),
        lambda: out.copy_(src),
        nbytes(src, out),
        src.numel(),
    )
    # A transposing copy (a strided read).
    transposed = torch.randn(HIDDEN, tokens, dtype=dtype).t()
    yield Case(
        f"({tokens}, {HIDDEN}) from its transpose",
        lambda: infini.ops.copy(transposed, False, out),
        lambda: out.copy_(transposed),
        nbytes(transposed, out),
        src.numel(),
    )
