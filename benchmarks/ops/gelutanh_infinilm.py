import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {INTERMEDIATE})",
        lambda: infini.ops.gelutanh_infinilm(x, out),
        lambda: F.gelu(x, approximate="tanh"),
        nbytes(x, out),
        x.numel(),
    )
