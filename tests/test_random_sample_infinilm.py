import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER


def _random_sample(logits, random_val, topp, topk, temperature, out, index=None):
    infini.ops.random_sample_infinilm(
        logits, random_val, topp, topk, temperature, out, implementation_index=index
    )
    return out


def _torch_random_sample(logits, random_val, topp, topk, temperature):
    """InfiniLM's reference, in float64 (ties in rank order go to the lower
    token id)."""
    if not (random_val > 0 and topp > 0 and topk > 1 and temperature > 0):
        return int(torch.argmax(logits.double()))
    values, indices = torch.sort(logits.double(), descending=True, stable=True)
    probs = torch.softmax((values - values[0]) / temperature, dim=0)
    cumulative = torch.cumsum(probs, dim=0)
    k_index = min(topk, logits.numel()) - 1
    threshold = min(float(cumulative[k_index]), topp) * random_val
    threshold = torch.tensor([threshold], dtype=torch.float64)
    position = int(torch.searchsorted(cumulative, threshold))
    return int(indices[min(position, logits.numel() - 1)])


# vocab, random_val, topp, topk, temperature, smoke
CASES = (
    (32000, 0.7, 0.9, 50, 0.8, True),
    (32000, 0.37, 0.8, 32000, 1.0, False),
    (32000, 0.999, 0.95, 1000, 1.5, False),
    (7, 0.6, 1.0, 7, 2.0, True),
    (7, 0.99, 0.4, 100, 0.5, False),
    (513, 0.5, 0.3, 4, 0.7, False),
    # The argmax cases.
    (513, 0.0, 0.9, 50, 1.0, False),
    (513, 0.5, 0.0, 50, 1.0, False),
    (513, 0.5, 0.9, 1, 1.0, False),
    (513, 0.5, 0.9, 50, 0.0, False),
)


# Triton's interpreter takes milliseconds a kernel step: a vocabulary of
# 4096 instead of 32000 there (top-k 32000 then leaves top-k off).
INTERPRETER_VOCAB = {32000: 4096}


@pytest.mark.parametrize(
    "vocab, random_val, topp, topk, temperature",
    [
        pytest.param(
            INTERPRETER_VOCAB.get(c[0], c[0]) if TRITON_INTERPRETER else c[0],
            *c[1:-1],
            marks=pytest.mark.smoke if c[-1] else (),
        )
        for c in CASES
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_random_sample_infinilm(
    vocab, random_val, topp, topk, temperature, dtype, device, implementation_index
):
    logits = (torch.randn(vocab, device=device) * 3).to(dtype)
    out = torch.empty((), dtype=torch.int64, device=device)
    _random_sample(
        logits, random_val, topp, topk, temperature, out, implementation_index
    )
    assert int(out) == _torch_random_sample(logits, random_val, topp, topk, temperature)


def test_random_sample_infinilm_strided_logits_int32_out(device, implementation_index):
    storage = torch.randn(3 * 1000, device=device)
    logits = storage[1::3]
    out = torch.empty((), dtype=torch.int32, device=device)
    for random_val in (0.05, 0.5, 0.95):
        _random_sample(logits, random_val, 0.9, 20, 1.0, out, implementation_index)
        assert int(out) == _torch_random_sample(logits, random_val, 0.9, 20, 1.0)


@pytest.mark.parametrize("vocab", [1, 2, 17])
def test_random_sample_infinilm_tiny_vocabularies(vocab, device, implementation_index):
    logits = torch.randn(vocab, device=device)
    out = torch.empty((), dtype=torch.int64, device=device)
    for random_val in (0.3, 1.0):
        _random_sample(logits, random_val, 0.99, 5, 0.7, out, implementation_index)
        assert int(out) == _torch_random_sample(logits, random_val, 0.99, 5, 0.7)


def test_random_sample_infinilm_ties_and_nan(device, implementation_index):
    # Equal logits rank by token id; a NaN ranks above every number, and its
    # argmax is the first NaN.
    logits = torch.tensor([1.0, 3.0, 3.0, 0.5, 3.0, 2.0], device=device)
    out = torch.empty((), dtype=torch.int64, device=device)
    results = []
    for random_val in (0.2, 0.5, 0.9):
        _random_sample(logits, random_val, 1.0, 3, 1.0, out, implementation_index)
        results.append(int(out))
    assert results == [1, 2, 4]
    logits[3] = logits[5] = float("nan")
    _random_sample(logits, 0.0, 1.0, 3, 1.0, out, implementation_index)
    assert int(out) == 3


def test_random_sample_infinilm_follows_random_val(device, implementation_index):
    # Three tokens with probabilities 0.5, 0.3, 0.2: the cumulative sums are
    # 0.5, 0.8, 1.0, so random_val picks them in thirds of the unit interval.
    logits = torch.log(torch.tensor([0.3, 0.5, 0.2], device=device))
    out = torch.empty((), dtype=torch.int64, device=device)
    results = []
    for random_val in (0.1, 0.49, 0.51, 0.79, 0.81, 1.0):
        _random_sample(logits, random_val, 1.0, 3, 1.0, out, implementation_index)
        results.append(int(out))
    assert results == [1, 1, 0, 0, 2, 2]


@pytest.mark.parametrize(
    "shape, out_shape, random_val, temperature, match",
    [
        ((4, 8), (), 0.5, 1.0, "`logits` must have 1 dimensions"),
        ((8,), (1,), 0.5, 1.0, "`out` must have 0 dimensions"),
        ((8,), (), 1.5, 1.0, "`random_val` must be in \\[0, 1\\]"),
        ((8,), (), 0.5, -1.0, "`temperature` must be a finite non-negative number"),
        ((0,), (), 0.5, 1.0, "`logits` must hold at least 1 token"),
    ],
)
def test_random_sample_infinilm_rejects_bad_arguments(
    shape, out_shape, random_val, temperature, match, device
):
    logits = torch.randn(shape, device=device)
    out = torch.full(out_shape, 7, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match=f"`random_sample_infinilm`: {match}"):
        infini.ops.random_sample_infinilm(logits, random_val, 0.9, 5, temperature, out)
    assert bool((out == 7).all())


def test_random_sample_infinilm_rejects_float_out(device):
    with pytest.raises(ValueError, match="`out` has dtype float32"):
        infini.ops.random_sample_infinilm(
            torch.randn(8, device=device), 0.5, 0.9, 5, 1.0, torch.empty(())
        )
