"""PyTorch eager sampling formulations the sampling benchmarks compare with."""

from __future__ import annotations

import torch

VOCAB = 32000


def vllm_top_k_top_p(logits, k, p):
    """vLLM's `TopKTopPSampler.forward_native`: sort-based masking, softmax,
    then an exponential race."""
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if k is not None:
        kth = logits_sort.gather(1, (logits_sort.size(1) - k.long()).unsqueeze(1))
        logits_sort.masked_fill_(logits_sort < kth, float("-inf"))
    if p is not None:
        probs_sum = logits_sort.softmax(dim=-1).cumsum(dim=-1)
        mask = probs_sum <= 1 - p.unsqueeze(1)
        mask[:, -1] = False
        logits_sort.masked_fill_(mask, float("-inf"))
    masked = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    probs = masked.softmax(dim=-1, dtype=torch.float32)
    return probs.div_(torch.empty_like(probs).exponential_()).argmax(dim=-1)
