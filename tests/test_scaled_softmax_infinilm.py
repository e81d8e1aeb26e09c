"""`scaled_softmax_infinilm` is `scaled_softmax` under InfiniLM's name: the
same checks (`tests/softmax_checks.py`)."""

import pytest
import torch

import infini.ops
from tests import softmax_checks

OP = "scaled_softmax_infinilm"


@pytest.mark.parametrize(
    "shape, dim, input_strides, out_strides, dtype, rtol, atol",
    list(softmax_checks.params()),
)
def test_scaled_softmax_infinilm(
    shape, dim, input_strides, out_strides, dtype, rtol, atol, device,
    implementation_index,
):  # fmt: skip
    softmax_checks.check_cases(
        OP, shape, dim, input_strides, out_strides, dtype, rtol, atol, device,
        implementation_index,
    )  # fmt: skip


@pytest.mark.parametrize("scale", [0.0, -1.5, 30.0])
def test_scaled_softmax_infinilm_scales(scale, device, implementation_index):
    input = torch.randn(6, 50, device=device)
    out = torch.empty_like(input)
    infini.ops.scaled_softmax_infinilm(
        input, scale, out, implementation_index=implementation_index
    )
    expected = torch.softmax(input.double() * scale, -1).float()
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-7)


def test_scaled_softmax_infinilm_float64_and_special_values(
    device, implementation_index
):
    softmax_checks.check_float64_and_special_values(OP, device, implementation_index)


def test_scaled_softmax_infinilm_in_place_and_overlap(device, implementation_index):
    softmax_checks.check_in_place_and_overlap(OP, device, implementation_index)


def test_scaled_softmax_infinilm_rejects_bad_arguments(device):
    softmax_checks.check_rejects_bad_arguments(OP, device)
    input = torch.randn(4, 5, device=device)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        infini.ops.scaled_softmax_infinilm(input, "0.5", torch.empty_like(input))
