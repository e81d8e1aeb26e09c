import torch

import infini.ops
from benchmarks.harness import Case, nbytes

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False

EXPERTS, TOPK = 64, 8


def cases(tokens, dtype):
    x = torch.randn(tokens, EXPERTS, dtype=dtype)
    values = torch.empty(tokens, TOPK)
    indices = torch.empty(tokens, TOPK, dtype=torch.int32)

    def reference():
        top = torch.softmax(x, dim=1, dtype=torch.float32).topk(TOPK, dim=1)
        return top.values / top.values.sum(dim=1, keepdim=True), top.indices

    yield Case(
        f"({tokens}, {EXPERTS}) top{TOPK}",
        lambda: infini.ops.topksoftmax_infinilm(x, TOPK, True, values, indices),
        reference,
        nbytes(x, values, indices),
        x.numel(),
        fused=True,
    )
