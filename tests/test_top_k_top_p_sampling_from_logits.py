import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
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
    # Triton's interpreter takes milliseconds a kernel step: a smaller batch
    # and vocabulary there.
    batch, vocab = (8, 2048) if TRITON_INTERPRETER else (16, 32000)
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


@pytest.mark.parametrize(
    "order, dtype",
    [
        ("top_k_first", torch.float16),
        ("joint", torch.bfloat16),
        ("top_k_first", torch.float32),
        ("joint", torch.float32),
    ],
)
def test_top_k_top_p_sampling_from_logits_mixed_filters(
    order, dtype, device, implementation_index
):
    # Rows with top-k only, top-p only, both, neither (k <= 0 or >= vocab,
    # p = 1), greedy (k = 1) and ties (16-bit logits rounded to few values)
    # side by side; int32 `top_k` and float64 `top_p` per row.
    rows, vocab = 8, 300
    logits = (torch.randn(rows, vocab) * 2).round().to(dtype).to(device)
    top_k = torch.tensor([0, 7, 300, 1, 40, -3, 7, 1000], dtype=torch.int32)
    top_p = torch.tensor([1.0, 1.0, 0.5, 0.3, 0.8, 0.95, 0.2, 1.0]).double()
    out = torch.empty(rows, dtype=torch.int64, device=device)
    joint = order == "joint"
    _sample(logits, top_k, top_p, None, order, 5, 0, out, implementation_index)
    for row in range(rows):
        allowed = allowed_tokens(
            logits[row].float().cpu(), int(top_k[row]), float(top_p[row]), joint
        )
        assert int(out[row]) in allowed
    assert int(out[3]) == int(logits[3].float().argmax())


def _uniform(seed, offset, row):
    """The counter-based generator of the CPU kernels, in Python."""

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
        return z ^ (z >> 31)

    golden = 0x9E3779B97F4A7C15
    z = mix((seed + golden) % 2**64)
    z = mix(z ^ ((offset + 2 * golden) % 2**64))
    z = mix(z ^ ((row + 3 * golden) % 2**64))
    return (z >> 11) / 2.0**53


@pytest.mark.parametrize("seed, offset", [(0, 0), (12345, 7), (-1, 2**64 - 1)])
def test_top_k_top_p_sampling_from_logits_uniform_numbers(
    seed, offset, device, implementation_index
):
    # Equal logits and no filter: row r draws token floor(u_r * vocab)
    # exactly (every weight is 1), which pins the top bits of each uniform
    # number to the generator's reference.
    rows, vocab = 64, 1024
    logits = torch.zeros(rows, vocab, device=device)
    out = torch.empty(rows, dtype=torch.int64, device=device)
    _sample(
        logits, torch.tensor([0]), torch.tensor([1.0]), None, "top_k_first", seed,
        offset, out, implementation_index,
    )  # fmt: skip
    expected = [
        int(_uniform(seed % 2**64, offset % 2**64, row) * vocab) for row in range(rows)
    ]
    assert out.cpu().tolist() == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top_k_top_p_sampling_from_logits_greedy(dtype, device, implementation_index):
    # top_k = 1 everywhere: the first largest logit of each row, NaN above
    # every number, read through a transposed view, into int32 tokens.
    rows, vocab = 5, 49152
    logits = torch.randn(vocab, rows).to(dtype).t()
    logits[1, 7] = logits[1, 9000] = 100.0
    logits[2, 300] = float("nan")
    logits[2, 200] = float("inf")
    logits[3] = -float("inf")
    logits = logits.to(device)
    out = torch.full((rows,), -1, dtype=torch.int32, device=device)
    _sample(
        logits, torch.tensor([1]), torch.tensor([0.5]), None, "joint", 3, 0, out,
        implementation_index,
    )  # fmt: skip
    expected = logits.float().cpu().argmax(dim=1)
    expected[1], expected[2], expected[3] = 7, 300, 0
    assert out.cpu().tolist() == expected.tolist()


def test_top_k_top_p_sampling_from_logits_non_finite_rows(device, implementation_index):
    # A row whose largest logit is infinite or NaN has no probabilities: the
    # first largest logit is taken, as the CPU kernel does.
    logits = torch.randn(3, 50)
    logits[0, 4] = logits[0, 9] = float("inf")
    logits[1, 20] = float("nan")
    logits = logits.to(device)
    out = torch.empty(3, dtype=torch.int64, device=device)
    top_k, top_p = torch.tensor([10, 0, 10]), torch.tensor([0.9, 1.0, 1.0])
    for order in ("top_k_first", "joint"):
        _sample(logits, top_k, top_p, None, order, 1, 0, out, implementation_index)
        assert out[:2].cpu().tolist() == [4, 20]


def test_top_k_top_p_sampling_from_logits_is_reproducible(device, implementation_index):
    # Triton's interpreter takes milliseconds a kernel step: fewer rows there.
    rows = 9 if TRITON_INTERPRETER else 33
    logits = torch.randn(rows, 500, device=device)
    top_k = torch.full((1,), 50, dtype=torch.int64)
    top_p = torch.full((1,), 0.95)
    out = torch.empty(rows, dtype=torch.int64, device=device)
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
