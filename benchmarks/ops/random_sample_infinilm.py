import torch

import infini.ops
from benchmarks.harness import Case, nbytes
from benchmarks.ops._sampling import VOCAB

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False


def _reference(logits, random_val, topp, topk, temperature):
    values, indices = torch.sort(logits, descending=True)
    probs = torch.softmax((values - values[0]) / temperature, dim=0)
    cumulative = torch.cumsum(probs, dim=0)
    threshold = min(float(cumulative[topk - 1]), topp) * random_val
    return indices[torch.searchsorted(cumulative, threshold)]


def cases(tokens, dtype):
    if tokens != 1:  # one row by definition
        return
    logits = torch.randn(VOCAB, dtype=dtype) * 3
    out = torch.empty((), dtype=torch.int64)
    yield Case(
        f"({VOCAB},) k50 p0.9",
        lambda: infini.ops.random_sample_infinilm(logits, 0.5, 0.9, 50, 0.8, out),
        lambda: _reference(logits, 0.5, 0.9, 50, 0.8),
        nbytes(logits),
        logits.numel(),
        fused=True,
    )
