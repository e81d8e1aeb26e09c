import pytest
import torch

import infini.ops
from tests._sampling import allowed_tokens, empirical, kept_probabilities


def _sample(
    logits, top_k, top_p, indices, order, seed, offset, out, index=None, check_nan=False
):
    infini.ops.top_k_top_p_sampling_from_logits(
        logits,
        top_k,
        top_p,
        indices,
        order,
        True,
        check_nan,
        seed,
        offset,
        out,
        implementation_index=index,
    )
    return out


@pytest.mark.smoke
@pytest.mark.parametrize("order", ["top_k_first", "joint"])
def test_top_k_top_p_sampling_from_logits_stays_in_the_kept_set(
    order, device, implementation_index
):
    batch, vocab = 16, 32000
    logits = torch.randn(batch, vocab, device=device) * 3
    top_k = torch.randint(1, 100, (batch,), dtype=torch.int32)
    top_p = torch.rand(batch) * 0.9 + 0.05
    out = torch.empty(batch, dtype=torch.int32, device=device)
    joint = order == "joint"
    for seed in (0, 1):
        _sample(logits, top_k, top_p, None, order, seed, 0, out, implementation_index)
        for row in range(batch):
            allowed = allowed_tokens(
                logits[row], int(top_k[row]), float(top_p[row]), joint
            )
            assert int(out[row]) in allowed


def test_top_k_top_p_sampling_from_logits_is_reproducible(device, implementation_index):
    logits = torch.randn(33, 500, device=device)
    top_k = torch.full((1,), 50, dtype=torch.int64)
    top_p = torch.full((1,), 0.95)
    out = torch.empty(33, dtype=torch.int64, device=device)
    first = _sample(
        logits, top_k, top_p, None, "top_k_first", 9, 4, out, implementation_index
    ).clone()
    again = _sample(
        logits, top_k, top_p, None, "top_k_first", 9, 4, out, implementation_index
    ).clone()
    other = _sample(
        logits, top_k, top_p, None, "top_k_first", 9, 5, out, implementation_index
    ).clone()
    assert torch.equal(first, again) and not torch.equal(first, other)
    # Without a seed, torch's default generator decides.
    torch.manual_seed(3)
    unseeded = _sample(
        logits, top_k, top_p, None, "top_k_first", None, None, out, implementation_index
    ).clone()
    torch.manual_seed(3)
    assert torch.equal(
        unseeded,
        _sample(
            logits,
            top_k,
            top_p,
            None,
            "top_k_first",
            None,
            None,
            out,
            implementation_index,
        ),
    )


@pytest.mark.parametrize("order", ["top_k_first", "joint"])
def test_top_k_top_p_sampling_from_logits_frequencies(
    order, device, implementation_index
):
    vocab, rows = 8, 8192
    row = torch.tensor([2.0, 1.5, 1.0, 0.7, 0.3, 0.0, -0.5, -1.0], device=device)
    logits = row.expand(rows, vocab)
    out = torch.empty(rows, dtype=torch.int64, device=device)
    top_k, top_p = torch.tensor([5]), torch.tensor([0.7])
    _sample(logits, top_k, top_p, None, order, 17, 0, out, implementation_index)
    expected = kept_probabilities(row, 5, 0.7, joint=order == "joint")
    assert float((empirical(out, vocab) - expected).abs().max()) < 0.02


def test_top_k_top_p_sampling_from_logits_indices(device, implementation_index):
    logits = torch.randn(4, 64, device=device) * 5
    indices = torch.tensor([3, 3, 0, 2, 1], dtype=torch.int32)
    out = torch.empty(5, dtype=torch.int64, device=device)
    top_k = torch.ones(5, dtype=torch.int32)
    top_p = torch.ones(5)
    _sample(
        logits, top_k, top_p, indices, "top_k_first", 1, 0, out, implementation_index
    )
    assert torch.equal(out, logits.argmax(dim=1)[indices.long()])


def test_top_k_top_p_sampling_from_logits_checks_before_writing(device):
    logits = torch.randn(4, 64, device=device)
    logits[2, 5] = float("nan")
    out = torch.full((4,), 7, dtype=torch.int64, device=device)
    top_k, top_p = torch.full((4,), 5), torch.full((4,), 0.9)
    with pytest.raises(ValueError, match="`logits` contains NaN"):
        _sample(logits, top_k, top_p, None, "top_k_first", 1, 0, out, check_nan=True)
    indices = torch.tensor([0, 4, 1, 2])
    with pytest.raises(ValueError, match="`indices` must be in \\[0, 4\\)"):
        _sample(logits.nan_to_num(), top_k, top_p, indices, "top_k_first", 1, 0, out)
    assert bool((out == 7).all())


@pytest.mark.parametrize(
    "order, top_k_shape, out_dtype, match",
    [
        ("top_p_first", (4,), torch.int32, "`filter_apply_order` must be"),
        ("joint", (2,), torch.int32, "`top_k` must have shape \\(4,\\)"),
        ("joint", (4,), torch.int16, "`out` has dtype int16"),
    ],
)
def test_top_k_top_p_sampling_from_logits_rejects_bad_arguments(
    order, top_k_shape, out_dtype, match, device
):
    logits = torch.randn(4, 64, device=device)
    out = torch.full((4,), 7, dtype=out_dtype, device=device)
    with pytest.raises(
        ValueError, match=f"`top_k_top_p_sampling_from_logits`: {match}"
    ):
        _sample(
            logits,
            torch.full(top_k_shape, 5),
            torch.full((4,), 0.9),
            None,
            order,
            1,
            0,
            out,
        )
    assert bool((out == 7).all())
