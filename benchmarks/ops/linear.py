import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case
from benchmarks.ops.gemm import skipped


def cases(tokens, dtype):
    # The same points as `gemm` (no 512-token float16 point, see there).
    if skipped(tokens, dtype):
        return
    x = torch.randn(tokens, HIDDEN, dtype=dtype)
    weight = torch.randn(HIDDEN, HIDDEN, dtype=dtype) / HIDDEN**0.5
    bias = torch.randn(HIDDEN, dtype=dtype)
    out = torch.empty(tokens, HIDDEN, dtype=dtype)
    yield Case(
        f"({tokens}, {HIDDEN}) x ({HIDDEN}, {HIDDEN})^T + bias",
        lambda: infini.ops.linear(x, weight, bias, out),
        lambda: torch.addmm(bias, x, weight.t(), out=out),
        None,
        weight.numel(),
    )
