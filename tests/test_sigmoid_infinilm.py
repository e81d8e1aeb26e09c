import pytest
import torch

from tests import unary_checks as checks

OP = "sigmoid_infinilm"

# The kernels are `sigmoid`'s (tested there in depth).
CASES = (
    ((13, 4), None, None, (checks.F32, checks.F16), True),
    ((13, 4), (1, 13), None, (checks.F32,), False),
    ((0, 5), None, None, (checks.F32,), False),
)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, dtype, rtol, atol",
    list(checks.case_params((1e-6, 1e-7), CASES)),
)
def test_sigmoid_infinilm(
    shape, input_strides, out_strides, dtype, rtol, atol, device, implementation_index
):
    return checks.payload(
        OP,
        torch.sigmoid,
        (),
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


def test_sigmoid_infinilm_special_values(device, implementation_index):
    checks.check_special_values(
        OP, torch.sigmoid, (), torch.float32, device, implementation_index, 4e-7
    )


def test_sigmoid_infinilm_partially_overlapping_output_reads_input_first(
    device, implementation_index
):
    checks.check_partial_overlap(
        OP, torch.sigmoid, (), device, implementation_index, 1e-6
    )


def test_sigmoid_infinilm_rejects_bad_arguments(device):
    checks.check_rejections(OP, (), device)
