import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype, function=None):
    function = function or infini.ops.silu_and_mul
    x = torch.randn(tokens, 2 * INTERMEDIATE, dtype=dtype)
    out = torch.empty(tokens, INTERMEDIATE, dtype=dtype)
    gate, up = x[:, :INTERMEDIATE], x[:, INTERMEDIATE:]
    yield Case(
        f"({tokens}, 2 x {INTERMEDIATE})",
        lambda: function(x, out),
        lambda: torch.mul(F.silu(gate), up, out=out),
        nbytes(x, out),
        x.numel(),
        fused=True,
    )
