import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    up = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    gate = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    out = torch.empty_like(up)
    yield Case(
        f"({tokens}, {INTERMEDIATE})",
        lambda: infini.ops.swiglu(up, gate, out),
        lambda: torch.mul(up, F.silu(gate), out=out),
        nbytes(up, gate, out),
        up.numel(),
        fused=True,
    )
