import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case

# Products are compute-bound and slow on a small CPU: no 2048-token point.
MAX_TOKENS = 512


def cases(tokens, dtype):
    if tokens > MAX_TOKENS:
        return
    a = torch.randn(tokens, HIDDEN, dtype=dtype)
    b = torch.randn(HIDDEN, HIDDEN, dtype=dtype) / HIDDEN**0.5
    y = torch.empty(tokens, HIDDEN, dtype=dtype)
    yield Case(
        f"({tokens}, {HIDDEN}) x ({HIDDEN}, {HIDDEN})",
        lambda: infini.ops.gemm(a, b, y),
        lambda: torch.mm(a, b, out=y),
        None,
        b.numel(),
    )
