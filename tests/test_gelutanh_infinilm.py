import math

import pytest
import torch

from tests import unary_checks as checks

OP = "gelutanh_infinilm"
SCALARS = ()


def _reference(input):
    # `0.5 (1 + tanh(y)) = sigmoid(2 y)`: in float64 too, `1 + tanh(y)`
    # cancels to 0 for x < -19 where the true result is tiny but not 0.
    y = math.sqrt(2.0 / math.pi) * (input + 0.044715 * input**3)
    return input * torch.sigmoid(2.0 * y)


def test_reference_is_torch_gelu_tanh():
    input = torch.linspace(-8.0, 8.0, 1001, dtype=torch.float64)
    expected = torch.nn.functional.gelu(input, approximate="tanh")
    assert torch.allclose(_reference(input), expected, rtol=1e-9, atol=1e-15)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, dtype, rtol, atol",
    list(checks.case_params((1e-5, 1e-7), checks.LEAN_CASES)),
)
def test_gelutanh_infinilm(
    shape, input_strides, out_strides, dtype, rtol, atol, device, implementation_index
):
    return checks.payload(
        OP,
        _reference,
        SCALARS,
        shape,
        input_strides,
        out_strides,
        dtype,
        rtol,
        atol,
        device,
        implementation_index,
        scale=4.0,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gelutanh_infinilm_special_values(dtype, device, implementation_index):
    rtol = 4e-7 if dtype == torch.float32 else 1e-14
    checks.check_special_values(
        OP, _reference, SCALARS, dtype, device, implementation_index, rtol
    )


def test_gelutanh_infinilm_float32_sweep_against_float64(device, implementation_index):
    checks.check_sweep(
        OP, _reference, SCALARS, -12.0, 12.0, device, implementation_index, 1e-5, 1e-30
    )


@pytest.mark.smoke
def test_gelutanh_infinilm_in_place(device, implementation_index):
    checks.check_in_place(OP, _reference, SCALARS, device, implementation_index, 1e-6)


def test_gelutanh_infinilm_partially_overlapping_output_reads_input_first(
    device, implementation_index
):
    checks.check_partial_overlap(
        OP, _reference, SCALARS, device, implementation_index, 1e-6
    )


def test_gelutanh_infinilm_rejects_bad_arguments(device):
    checks.check_rejections(OP, SCALARS, device)
