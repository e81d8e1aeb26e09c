import pytest
import torch

import infini.ops
from tests._sampling import allowed_tokens, empirical, kept_probabilities


def _sample(logits, k, p, seed, offset, out, index=None):
    infini.ops.top_k_top_p_sample_infinilm(
        logits, k, p, seed, offset, out, implementation_index=index
    )
    return out


@pytest.mark.smoke
def test_top_k_top_p_sample_infinilm_seeds(device, implementation_index):
    # The original's check: equal seeds agree, different seeds differ on a
    # uniform 64 x 16 batch.
    logits = torch.zeros(64, 16, device=device)
    out = torch.empty(64, dtype=torch.int64, device=device)
    first = _sample(logits, None, None, 42, 0, out, implementation_index).clone()
    again = _sample(logits, None, None, 42, 0, out, implementation_index).clone()
    other_seed = _sample(logits, None, None, 43, 0, out, implementation_index).clone()
    other_offset = _sample(logits, None, None, 42, 1, out, implementation_index).clone()
    assert torch.equal(first, again)
    assert not torch.equal(first, other_seed)
    assert not torch.equal(first, other_offset)
    assert len(set(first.tolist())) > 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top_k_top_p_sample_infinilm_degenerate_filters_give_argmax(
    dtype, device, implementation_index
):
    logits = (torch.randn(16, 32000, device=device) * 4).to(dtype)
    out = torch.empty(16, dtype=torch.int32, device=device)
    expected = logits.float().argmax(dim=1)
    _sample(
        logits, torch.ones(1, dtype=torch.int64), None, 7, 3, out, implementation_index
    )
    assert torch.equal(out.long(), expected)
    _sample(logits, None, torch.full((16,), 1e-9), 7, 3, out, implementation_index)
    assert torch.equal(out.long(), expected)


@pytest.mark.parametrize("seed", [0, 1, 2**64 - 1, -5])
def test_top_k_top_p_sample_infinilm_stays_in_the_kept_set(
    seed, device, implementation_index
):
    logits = torch.randn(33, 1000, device=device) * 3
    k = torch.randint(1, 40, (33,), dtype=torch.int32)
    p = torch.rand(33, dtype=torch.float64) * 0.9 + 0.05
    out = torch.empty(33, dtype=torch.int64, device=device)
    _sample(logits, k, p, seed, 11, out, implementation_index)
    for row in range(33):
        assert int(out[row]) in allowed_tokens(logits[row], int(k[row]), float(p[row]))


def test_top_k_top_p_sample_infinilm_frequencies(device, implementation_index):
    vocab, rows = 8, 8192
    row = torch.tensor([0.3, 2.0, -1.0, 1.5, 0.0, 1.0, -0.5, 0.7], device=device)
    logits = row.repeat(rows, 1).to(torch.float16)
    out = torch.empty(rows, dtype=torch.int64, device=device)
    _sample(logits, None, torch.tensor([0.9]), 5, 0, out, implementation_index)
    expected = kept_probabilities(logits[0].float(), 0, 0.9)
    assert float((empirical(out, vocab) - expected).abs().max()) < 0.02


def test_top_k_top_p_sample_infinilm_rejects_bad_arguments(device):
    logits = torch.randn(4, 8, device=device)
    out = torch.full((4,), 7, dtype=torch.int32, device=device)
    with pytest.raises(
        ValueError, match="`top_k_top_p_sample_infinilm`: `k` has dtype"
    ):
        infini.ops.top_k_top_p_sample_infinilm(logits, torch.ones(4), None, 1, 0, out)
    with pytest.raises(ValueError, match="`out` must have shape \\(4,\\)"):
        infini.ops.top_k_top_p_sample_infinilm(
            logits, None, None, 1, 0, torch.empty(5, dtype=torch.int32)
        )
    assert bool((out == 7).all())
