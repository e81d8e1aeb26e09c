import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype, function=None):
    function = function or infini.ops.softmax
    x = torch.randn(tokens, HIDDEN, dtype=dtype)
    out = torch.empty_like(x)
    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: function(x, -1, None, out),
        lambda: torch.softmax(x, -1, out=out),
        nbytes(x, out),
        x.numel(),
        fused=True,
    )
