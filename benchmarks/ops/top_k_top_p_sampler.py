import torch

import infini.ops
from benchmarks.harness import Case, nbytes
from benchmarks.ops._sampling import VOCAB, vllm_top_k_top_p

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False


def cases(tokens, dtype):
    logits = torch.randn(tokens, VOCAB, dtype=dtype) * 3
    k = torch.full((tokens,), 50, dtype=torch.int64)
    p = torch.full((tokens,), 0.9)
    out = torch.empty(tokens, dtype=torch.int32)
    yield Case(
        f"({tokens}, {VOCAB}) k50 p0.9",
        lambda: infini.ops.top_k_top_p_sampler(logits, k, p, out),
        lambda: vllm_top_k_top_p(logits, k, p),
        nbytes(logits, out),
        logits.numel(),
        fused=True,
    )
