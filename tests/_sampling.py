"""Reference helpers shared by the sampling tests."""

from __future__ import annotations

import torch


def kept_probabilities(row, k, p, joint=False, slack=0.0):
    """The distribution a top-k / top-p sampler draws from for one row of
    logits, in float64 (indexed by token id; zero outside the kept set).

    Top-k keeps the `k` largest (ties to the lower id; ``k <= 0`` or
    ``k >= vocab``: all); top-p keeps tokens, in rank order, while the mass
    before them is below ``p + slack`` (at least one), relative to the top-k
    set (or to the whole row when `joint`). `slack` widens the set to absorb
    rounding at its boundary."""
    vocab = row.numel()
    probs = torch.softmax(row.double(), dim=0)
    order = torch.sort(row.double(), descending=True, stable=True).indices
    ranked = probs[order]
    kept_count = k if 0 < k < vocab else vocab
    keep = torch.zeros(vocab, dtype=torch.bool)
    keep[:kept_count] = True
    base = ranked if joint else torch.where(keep, ranked, torch.zeros_like(ranked))
    base = base / base.sum()
    before = torch.cumsum(base, 0) - base
    keep &= before < p + slack
    keep[0] = True
    result = torch.zeros(vocab, dtype=torch.float64)
    result[order[keep]] = ranked[keep]
    return result / result.sum()


def allowed_tokens(row, k, p, joint=False):
    """The token ids a sampler may return (boundary rounding absorbed)."""
    return set(
        kept_probabilities(row, k, p, joint, slack=1e-5).nonzero().flatten().tolist()
    )


def empirical(samples, vocab):
    """Frequencies of each token id among `samples`."""
    counts = torch.bincount(samples.long().flatten(), minlength=vocab).double()
    return counts / max(samples.numel(), 1)
