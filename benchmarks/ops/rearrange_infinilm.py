import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, Case, nbytes


def cases(tokens, dtype):
    # (tokens, heads, head) -> (heads, tokens, head) memory order, as an
    # attention layout change does.
    input = torch.randn(tokens, HEADS, HEAD_SIZE, dtype=dtype)
    out = torch.empty(HEADS, tokens, HEAD_SIZE, dtype=dtype).transpose(0, 1)
    yield Case(
        f"({tokens}, {HEADS}, {HEAD_SIZE}) -> heads-major",
        lambda: infini.ops.rearrange_infinilm(input, out),
        lambda: out.copy_(input),
        nbytes(input, out),
        input.numel(),
    )
