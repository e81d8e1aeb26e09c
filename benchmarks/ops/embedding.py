import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes

VOCAB = 32000


def cases(tokens, dtype):
    input = torch.randint(0, VOCAB, (tokens,))
    weight = torch.randn(VOCAB, HIDDEN, dtype=dtype)
    out = torch.empty(tokens, HIDDEN, dtype=dtype)
    # `index_select` is `F.embedding`'s forward with an `out=` form. Bytes:
    # the selected rows read, the output written and the indices read.
    yield Case(
        f"({tokens},) of ({VOCAB}, {HIDDEN})",
        lambda: infini.ops.embedding(input, weight, out),
        lambda: torch.index_select(weight, 0, input, out=out),
        2 * nbytes(out) + nbytes(input),
        out.numel(),
    )
