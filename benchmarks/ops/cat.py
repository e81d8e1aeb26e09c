import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, HIDDEN, KV_HEADS, Case, nbytes


def cases(tokens, dtype):
    # Joining a query and a key/value projection along the hidden dimension.
    q = torch.randn(tokens, HIDDEN, dtype=dtype)
    kv = torch.randn(tokens, 2 * KV_HEADS * HEAD_SIZE, dtype=dtype)
    out = torch.empty(tokens, q.shape[1] + kv.shape[1], dtype=dtype)
    yield Case(
        f"({tokens}, {HIDDEN}) + ({tokens}, {kv.shape[1]})",
        lambda: infini.ops.cat([q, kv], 1, out),
        lambda: torch.cat([q, kv], 1, out=out),
        nbytes(q, kv, out),
        out.numel(),
    )
