import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

# The kernels are `relu`'s (tested there in depth, special values included).


def _relu_infinilm(input, out, implementation_index):
    infini.ops.relu_infinilm(input, out, implementation_index=implementation_index)
    return out


def _torch_relu(input, out, implementation_index):
    return torch.nn.functional.relu(input)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides",
    [
        pytest.param((13, 4), None, None, marks=pytest.mark.smoke),
        ((13, 4), (1, 13), None),
        ((13, 4), (0, 1), (1, 13)),
        ((16, 5632), None, None),
        ((0, 5), None, None),
    ],
)
def test_relu_infinilm(
    shape, input_strides, out_strides, dtype, device, implementation_index, rtol, atol
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _relu_infinilm, _torch_relu, (input, out, implementation_index), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.float64], ids=str)
def test_relu_infinilm_other_dtypes(dtype, device, implementation_index):
    input = randint_strided(-100, 100, (7, 9), dtype=torch.int64, device=device)
    input = input.to(dtype) if dtype != torch.uint8 else input.abs().to(dtype)
    out = torch.empty_like(input)
    _relu_infinilm(input, out, implementation_index)
    expected = input if dtype == torch.uint8 else torch.relu(input)
    assert torch.equal(out, expected)


def test_relu_infinilm_keeps_negative_zero_and_nan(device, implementation_index):
    input = torch.tensor([-0.0, -1.0, float("nan"), -float("inf")], device=device)
    out = torch.empty_like(input)
    _relu_infinilm(input, out, implementation_index)
    assert torch.equal(out.view(torch.int32), torch.relu(input).view(torch.int32))


@pytest.mark.smoke
def test_relu_infinilm_in_place_and_overlapping(device, implementation_index):
    input = torch.randn(33, 33, device=device)
    expected = torch.relu(input)
    _relu_infinilm(input, input.t(), implementation_index)
    assert torch.equal(input.t(), expected)
    _relu_infinilm(input, input, implementation_index)
    assert torch.equal(input, torch.relu(expected.t()))


def test_relu_infinilm_rejects_bad_arguments(device):
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match="`relu_infinilm`: `input` has dtype bool"):
        flags = torch.ones(4, dtype=torch.bool, device=device)
        infini.ops.relu_infinilm(flags, torch.empty_like(flags))
    with pytest.raises(ValueError, match="`relu_infinilm`: `out` has dtype float16"):
        infini.ops.relu_infinilm(input, input.half())
    out = torch.full((5, 4), 7.0, device=device)
    with pytest.raises(ValueError, match="`relu_infinilm`: `out` must have shape"):
        infini.ops.relu_infinilm(input, out)
    assert bool((out == 7.0).all())
    with pytest.raises(ValueError, match="`relu_infinilm`: `out` is written but"):
        infini.ops.relu_infinilm(input, torch.empty(1, 5, device=device).expand(4, 5))
