import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes

SCALE = 0.125


def cases(tokens, dtype, function=None):
    function = function or infini.ops.scaled_softmax
    x = torch.randn(tokens, HIDDEN, dtype=dtype)
    scaled = torch.empty_like(x)
    out = torch.empty_like(x)

    def reference():
        torch.mul(x, SCALE, out=scaled)
        torch.softmax(scaled, -1, out=out)

    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: function(x, SCALE, out),
        reference,
        nbytes(x, out),
        x.numel(),
    )
