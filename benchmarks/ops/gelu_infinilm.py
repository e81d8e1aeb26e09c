import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import INTERMEDIATE, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, INTERMEDIATE, dtype=dtype)
    out = torch.empty_like(x)
    for approximate in ("none", "tanh"):
        yield Case(
            f"({tokens}, {INTERMEDIATE}) {approximate}",
            lambda approximate=approximate: infini.ops.gelu_infinilm(
                x, approximate, out
            ),
            lambda a=approximate: F.gelu(x, approximate=a),
            nbytes(x, out),
            x.numel(),
        )
