import torch

import infini.ops
from benchmarks.harness import Case, nbytes

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False

# DeepSeek-V3 routing: 256 experts in 8 groups, 4 groups kept, top 8.
EXPERTS, GROUPS, TOPK_GROUP, TOPK, SCALE = 256, 8, 4, 8, 2.5


def cases(tokens, dtype):
    scores = torch.randn(tokens, EXPERTS, dtype=dtype)
    bias = torch.randn(EXPERTS) * 0.1
    values = torch.empty(tokens, TOPK)
    indices = torch.empty(tokens, TOPK, dtype=torch.int32)

    def reference():
        # vLLM's `biased_grouped_topk`.
        s = torch.sigmoid(scores.float())
        choice = s + bias
        group_scores = choice.view(tokens, GROUPS, -1).topk(2, dim=-1)[0].sum(-1)
        group_idx = group_scores.topk(TOPK_GROUP, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        mask = group_mask.unsqueeze(-1).expand(-1, -1, EXPERTS // GROUPS)
        masked = choice.masked_fill(~mask.reshape(tokens, -1).bool(), float("-inf"))
        ids = masked.topk(TOPK, dim=-1, sorted=False)[1]
        weights = s.gather(1, ids)
        return weights / weights.sum(dim=-1, keepdim=True) * SCALE, ids

    yield Case(
        f"({tokens}, {EXPERTS}) g{GROUPS}/{TOPK_GROUP} top{TOPK}",
        lambda: infini.ops.grouped_topk(
            scores, bias, GROUPS, TOPK_GROUP, TOPK, True, SCALE, 1, values, indices
        ),
        reference,
        nbytes(scores, values, indices),
        scores.numel(),
        fused=True,
    )
