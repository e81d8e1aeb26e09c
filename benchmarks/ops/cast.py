import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype):
    # float32 <-> the 16-bit type; float32 itself casts to float16.
    target = torch.float16 if dtype == torch.float32 else torch.float32
    x = torch.randn(tokens, HIDDEN, dtype=dtype)
    out = torch.empty(tokens, HIDDEN, dtype=target)
    yield Case(
        f"({tokens}, {HIDDEN}) -> {str(target).removeprefix('torch.')}",
        lambda: infini.ops.cast(x, out),
        lambda: out.copy_(x),
        nbytes(x, out),
        x.numel(),
    )
