import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, 2 * INTERMEDIATE, dtype=dtype)
    out = torch.empty(tokens, INTERMEDIATE, dtype=dtype)
    gate, up = x[:, :INTERMEDIATE], x[:, INTERMEDIATE:]
    yield Case(
        f"({tokens}, 2 x {INTERMEDIATE})",
        lambda: infini.ops.gelu_tanh_and_mul(x, out),
        lambda: torch.mul(F.gelu(gate, approximate="tanh"), up, out=out),
        nbytes(x, out),
        x.numel(),
        fused=True,
    )
