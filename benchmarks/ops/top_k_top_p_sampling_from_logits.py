import torch

import infini.ops
from benchmarks.harness import Case, nbytes
from benchmarks.ops._sampling import VOCAB

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False


def _flashinfer_eager(logits, top_k, top_p):
    """FlashInfer's "top_k_first" order in torch eager: top-k mask,
    softmax, top-p on the renormalised distribution, multinomial draw."""
    kth = logits.topk(int(top_k.max()), dim=-1).values[:, -1:]
    masked = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(masked, dim=-1, dtype=torch.float32)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs.masked_fill_(before >= top_p.unsqueeze(1), 0.0)
    choice = torch.multinomial(sorted_probs, 1)
    return order.gather(1, choice).squeeze(1)


def cases(tokens, dtype):
    logits = torch.randn(tokens, VOCAB, dtype=dtype) * 3
    top_k = torch.full((tokens,), 50, dtype=torch.int32)
    top_p = torch.full((tokens,), 0.9)
    out = torch.empty(tokens, dtype=torch.int32)
    yield Case(
        f"({tokens}, {VOCAB}) k50 p0.9",
        lambda: infini.ops.top_k_top_p_sampling_from_logits(
            logits, top_k, top_p, None, "top_k_first", True, False, 3, 0, out
        ),
        lambda: _flashinfer_eager(logits, top_k, top_p),
        nbytes(logits, out),
        logits.numel(),
        fused=True,
    )
