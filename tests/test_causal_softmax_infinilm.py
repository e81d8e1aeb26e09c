"""`causal_softmax_infinilm` is `causal_softmax` under InfiniLM's name: the
same cases, reference and tolerances (see `test_causal_softmax.py`)."""

import pytest
import torch

import infini.ops
from tests.test_causal_softmax import _params, _torch_causal_softmax
from tests.utils import Payload, empty_strided, randn_strided


def _causal_softmax_infinilm(input, out, implementation_index):
    infini.ops.causal_softmax_infinilm(
        input, out, implementation_index=implementation_index
    )
    return out


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, dtype, rtol, atol", list(_params())
)
def test_causal_softmax_infinilm(
    shape, input_strides, out_strides, dtype, rtol, atol, device, implementation_index
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _causal_softmax_infinilm,
        _torch_causal_softmax,
        (input, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_causal_softmax_infinilm_float64(device, implementation_index):
    input = torch.randn(2, 3, 7, 33, dtype=torch.float64, device=device)
    out = torch.empty_like(input)
    _causal_softmax_infinilm(input, out, implementation_index)
    expected = _torch_causal_softmax(input, out)
    assert torch.allclose(out, expected, rtol=1e-14, atol=1e-16)


def test_causal_softmax_infinilm_in_place(device, implementation_index):
    input = torch.randn(2, 33, 40, device=device)
    expected = _torch_causal_softmax(input, input)
    _causal_softmax_infinilm(input, input, implementation_index)
    assert torch.allclose(input, expected, rtol=1e-6, atol=1e-7)


def test_causal_softmax_infinilm_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    storage = torch.randn(40 * 32, device=device)
    input = storage[: 32 * 32].view(32, 32)
    expected = _torch_causal_softmax(input, input)
    out = storage[8 * 32 :].view(32, 32).t()
    _causal_softmax_infinilm(input, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7)


def test_causal_softmax_infinilm_rejects_bad_input(device):
    input = torch.randn(8, device=device)
    with pytest.raises(
        ValueError, match="`causal_softmax_infinilm`: `input` must have at least 2"
    ):
        infini.ops.causal_softmax_infinilm(input, torch.empty_like(input))
    input = torch.randn(4, 5, device=device)
    out = torch.full((5, 4), 7.0, device=device)
    with pytest.raises(
        ValueError, match="`causal_softmax_infinilm`: `out` must have shape"
    ):
        infini.ops.causal_softmax_infinilm(input, out)
    assert bool((out == 7.0).all())
    with pytest.raises(ValueError, match="`causal_softmax_infinilm`: `out` has dtype"):
        infini.ops.causal_softmax_infinilm(input, input.double())
    with pytest.raises(
        ValueError, match="`causal_softmax_infinilm`: `input` has dtype"
    ):
        infini.ops.causal_softmax_infinilm(input.int(), input.int())
    with pytest.raises(ValueError, match="`causal_softmax_infinilm`: `out` is written"):
        infini.ops.causal_softmax_infinilm(input, input[:1].expand(4, 5))
    with pytest.raises(TypeError, match="`causal_softmax_infinilm`: incompatible"):
        infini.ops.causal_softmax_infinilm(input)
