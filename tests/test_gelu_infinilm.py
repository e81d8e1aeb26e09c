import math

import pytest
import torch

import infini.ops
from tests import unary_checks as checks

OP = "gelu_infinilm"


def _reference(input, approximate):
    if approximate == "tanh":
        y = math.sqrt(2.0 / math.pi) * (input + 0.044715 * input**3)
        return input * torch.sigmoid(2.0 * y)
    return 0.5 * input * torch.special.erfc(-input * math.sqrt(0.5))


# The kernels are `gelu`'s (tested there in depth).
CASES = (
    ((13, 4), None, None, (checks.F32, checks.BF16), True),
    ((13, 4), (1, 13), None, (checks.F32,), False),
    ((0, 5), None, None, (checks.F32,), False),
)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, dtype, rtol, atol",
    list(checks.case_params((1e-5, 1e-7), CASES)),
)
def test_gelu_infinilm(
    approximate,
    shape,
    input_strides,
    out_strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    return checks.payload(
        OP,
        lambda input: _reference(input, approximate),
        (approximate,),
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


def test_gelu_infinilm_in_place(device, implementation_index):
    checks.check_in_place(
        OP,
        lambda input: _reference(input, "tanh"),
        ("tanh",),
        device,
        implementation_index,
        1e-5,
    )


def test_gelu_infinilm_rejects_bad_arguments(device):
    checks.check_rejections(OP, ("tanh",), device)
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match="`gelu_infinilm`: `approximate` must be"):
        infini.ops.gelu_infinilm(input, "exact", torch.empty_like(input))
