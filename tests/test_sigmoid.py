import pytest
import torch

from tests import unary_checks as checks

OP = "sigmoid"
SCALARS = ()


def _reference(input):
    return torch.sigmoid(input)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, dtype, rtol, atol",
    list(checks.case_params((1e-6, 1e-7), checks.LEAN_CASES)),
)
def test_sigmoid(
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
def test_sigmoid_special_values(dtype, device, implementation_index):
    rtol = 4e-7 if dtype == torch.float32 else 1e-14
    checks.check_special_values(
        OP, _reference, SCALARS, dtype, device, implementation_index, rtol
    )


def test_sigmoid_float32_sweep_against_float64(device, implementation_index):
    checks.check_sweep(
        OP,
        _reference,
        SCALARS,
        -110.0,
        100.0,
        device,
        implementation_index,
        5e-7,
        1e-38,
    )


@pytest.mark.smoke
def test_sigmoid_in_place(device, implementation_index):
    checks.check_in_place(OP, _reference, SCALARS, device, implementation_index, 1e-6)


def test_sigmoid_partially_overlapping_output_reads_input_first(
    device, implementation_index
):
    checks.check_partial_overlap(
        OP, _reference, SCALARS, device, implementation_index, 1e-6
    )


def test_sigmoid_rejects_bad_arguments(device):
    checks.check_rejections(OP, SCALARS, device)
