import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, HIDDEN, dtype=dtype)
    weight = torch.randn(HIDDEN, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: infini.ops.rms_norm(x, weight, 1e-6, out),
        lambda: F.rms_norm(x, (HIDDEN,), weight, 1e-6),
        nbytes(x, weight, out),
        x.numel(),
        fused=True,
    )
