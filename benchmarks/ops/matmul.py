import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case
from benchmarks.ops.gemm import skipped


def cases(tokens, dtype):
    # The same points as `gemm` (no 512-token float16 point, see there).
    if skipped(tokens, dtype):
        return
    a = torch.randn(tokens, HIDDEN, dtype=dtype)
    b = torch.randn(HIDDEN, HIDDEN, dtype=dtype) / HIDDEN**0.5
    out = torch.empty(tokens, HIDDEN, dtype=dtype)
    yield Case(
        f"({tokens}, {HIDDEN}) x ({HIDDEN}, {HIDDEN})",
        lambda: infini.ops.matmul(a, b, out),
        lambda: torch.matmul(a, b, out=out),
        None,
        b.numel(),
    )
