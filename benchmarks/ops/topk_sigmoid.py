import torch

import infini.ops
from benchmarks.harness import Case, nbytes

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False

EXPERTS, TOPK = 128, 8


def cases(tokens, dtype):
    gating = torch.randn(tokens, EXPERTS, dtype=dtype)
    bias = torch.randn(EXPERTS) * 0.1
    weights = torch.empty(tokens, TOPK)
    ids = torch.empty(tokens, TOPK, dtype=torch.int32)
    token_ids = torch.empty(tokens, TOPK, dtype=torch.int32)

    def reference():
        scores = torch.sigmoid(gating.float())
        indices = (scores + bias).topk(TOPK, dim=-1).indices
        values = scores.gather(1, indices)
        return values / values.sum(dim=-1, keepdim=True) * 2.5, indices.to(torch.int32)

    yield Case(
        f"({tokens}, {EXPERTS}) top{TOPK}",
        lambda: infini.ops.topk_sigmoid(
            gating, bias, None, True, 2.5, weights, ids, token_ids
        ),
        reference,
        nbytes(gating, weights, ids, token_ids),
        gating.numel(),
        fused=True,
    )
