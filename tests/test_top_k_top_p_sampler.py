import pytest
import torch

import infini.ops
from tests._sampling import allowed_tokens, empirical, kept_probabilities


def _sample(logits, k, p, out, index=None):
    infini.ops.top_k_top_p_sampler(logits, k, p, out, implementation_index=index)
    return out


@pytest.mark.smoke
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 16, 33])
def test_top_k_top_p_sampler_top_k_1_is_argmax(
    batch, dtype, device, implementation_index
):
    logits = (torch.randn(batch, 32000, device=device) * 4).to(dtype)
    out = torch.empty(batch, dtype=torch.int32, device=device)
    k = torch.ones(batch, dtype=torch.int64)
    _sample(logits, k, None, out, implementation_index)
    assert torch.equal(out.long(), logits.float().argmax(dim=1))


def test_top_k_top_p_sampler_tiny_top_p_is_argmax(device, implementation_index):
    logits = torch.randn(16, 32000, device=device) * 4
    out = torch.empty(16, dtype=torch.int32, device=device)
    _sample(logits, None, torch.full((1,), 1e-9), out, implementation_index)
    assert torch.equal(out.long(), logits.argmax(dim=1))


# batch, vocab, k, p (None: absent), logits strides
CASES = (
    (16, 32000, 50, 0.9, None),
    (16, 32000, None, 0.5, None),
    (16, 32000, 20, None, None),
    (5, 100, 7, 0.6, (1, 5)),
    (3, 33, 0, 0.8, (40, 1)),
)


@pytest.mark.parametrize("batch, vocab, k, p, strides", CASES)
def test_top_k_top_p_sampler_stays_in_the_kept_set(
    batch, vocab, k, p, strides, device, implementation_index
):
    if strides is None:
        logits = torch.randn(batch, vocab, device=device) * 3
    else:
        storage = torch.randn(batch * vocab * 2, device=device) * 3
        logits = torch.as_strided(storage, (batch, vocab), strides)
    k_tensor = None if k is None else torch.randint(max(k, 1), max(k, 1) + 5, (batch,))
    if k == 0:
        k_tensor = torch.zeros(batch, dtype=torch.int64)
    p_tensor = None if p is None else torch.rand(batch) * p + 0.05
    out = torch.empty(batch, dtype=torch.int64, device=device)
    for _ in range(3):
        _sample(logits, k_tensor, p_tensor, out, implementation_index)
        for row in range(batch):
            row_k = 0 if k_tensor is None else int(k_tensor[row])
            row_p = 1.0 if p_tensor is None else float(p_tensor[row])
            assert int(out[row]) in allowed_tokens(logits[row], row_k, row_p)


def test_top_k_top_p_sampler_follows_torch_manual_seed(device, implementation_index):
    logits = torch.zeros(64, 16, device=device)
    out = torch.empty(64, dtype=torch.int32, device=device)
    torch.manual_seed(123)
    first = _sample(logits, None, None, out, implementation_index).clone()
    torch.manual_seed(123)
    again = _sample(logits, None, None, out, implementation_index).clone()
    other = _sample(logits, None, None, out, implementation_index).clone()
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_top_k_top_p_sampler_frequencies_follow_the_kept_distribution(
    device, implementation_index
):
    vocab, rows = 8, 8192
    row = torch.tensor([2.0, 1.5, 1.0, 0.7, 0.3, 0.0, -0.5, -1.0], device=device)
    logits = row.expand(rows, vocab)  # stride-0 rows: one row read 8192 times
    k = torch.tensor([6], dtype=torch.int32)
    p = torch.tensor([0.85], dtype=torch.float64)
    out = torch.empty(rows, dtype=torch.int64, device=device)
    _sample(logits, k, p, out, implementation_index)
    expected = kept_probabilities(row, 6, 0.85)
    assert float((empirical(out, vocab) - expected).abs().max()) < 0.02
    assert bool((empirical(out, vocab)[expected == 0] == 0).all())


def test_top_k_top_p_sampler_zero_rows(device, implementation_index):
    out = torch.empty(0, dtype=torch.int32, device=device)
    _sample(torch.randn(0, 10, device=device), None, None, out, implementation_index)


@pytest.mark.parametrize(
    "logits_shape, k_shape, p_dtype, out_dtype, match",
    [
        ((4,), None, torch.float32, torch.int32, "`logits` must have 2 dimensions"),
        ((4, 8), (3,), torch.float32, torch.int32, "`k` must have shape \\(4,\\)"),
        ((4, 8), None, torch.float16, torch.int32, "`p` has dtype float16"),
        ((4, 8), None, torch.float32, torch.float32, "`out` has dtype float32"),
        (
            (4, 0),
            None,
            torch.float32,
            torch.int32,
            "`logits` must have a vocabulary of at least 1",
        ),
    ],
)
def test_top_k_top_p_sampler_rejects_bad_arguments(
    logits_shape, k_shape, p_dtype, out_dtype, match, device
):
    logits = torch.randn(logits_shape, device=device)
    k = None if k_shape is None else torch.ones(k_shape, dtype=torch.int64)
    p = torch.full((1,), 0.5, dtype=p_dtype)
    out = torch.full((logits_shape[0],), 7, dtype=out_dtype, device=device)
    with pytest.raises(ValueError, match=f"`top_k_top_p_sampler`: {match}"):
        infini.ops.top_k_top_p_sampler(logits, k, p, out)
    assert bool((out == 7).all())
