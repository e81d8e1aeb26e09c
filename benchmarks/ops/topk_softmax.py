import torch

import infini.ops
from benchmarks.harness import Case, nbytes

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False

# (experts, topk): Mixtral-like and Qwen-MoE-like routers.
ROUTERS = ((8, 2), (64, 8))


def cases(tokens, dtype):
    for experts, topk in ROUTERS:
        gating = torch.randn(tokens, experts, dtype=dtype)
        weights = torch.empty(tokens, topk)
        ids = torch.empty(tokens, topk, dtype=torch.int32)
        token_ids = torch.empty(tokens, topk, dtype=torch.int32)

        def reference(gating=gating, topk=topk):
            probs = torch.softmax(gating, dim=-1, dtype=torch.float32)
            values, indices = probs.topk(topk, dim=-1)
            return values / values.sum(dim=-1, keepdim=True), indices.to(torch.int32)

        yield Case(
            f"({tokens}, {experts}) top{topk}",
            lambda g=gating, w=weights, i=ids, t=token_ids: infini.ops.topk_softmax(
                g, None, None, True, w, i, t
            ),
            reference,
            nbytes(gating, weights, ids, token_ids),
            gating.numel(),
            fused=True,
        )
