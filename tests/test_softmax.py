import pytest
import torch

import infini.ops
from tests import softmax_checks
from tests.utils import Payload, randn_strided

OP = "softmax"


@pytest.mark.parametrize(
    "shape, dim, input_strides, out_strides, dtype, rtol, atol",
    list(softmax_checks.params()),
)
def test_softmax(
    shape, dim, input_strides, out_strides, dtype, rtol, atol, device,
    implementation_index,
):  # fmt: skip
    softmax_checks.check_cases(
        OP, shape, dim, input_strides, out_strides, dtype, rtol, atol, device,
        implementation_index,
    )  # fmt: skip


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "input_dtype, dtype, rtol, atol",
    [
        (torch.float16, torch.float32, 1e-5, 1e-7),
        (torch.float32, torch.bfloat16, 1e-2, 1e-2),
        (torch.bfloat16, "float64", 1e-12, 1e-15),
    ],
)
def test_softmax_dtype_converts_input_first(
    input_dtype, dtype, rtol, atol, device, implementation_index
):
    input = randn_strided((5, 40), None, dtype=input_dtype, device=device) * 4
    out_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype

    def run(input, out):
        return softmax_checks.call(OP, input, out, 1, 1.0, dtype, implementation_index)

    def expected(input, out):
        return torch.softmax(input.to(out_dtype).double(), 1).to(out_dtype)

    out = torch.empty(5, 40, dtype=out_dtype, device=device)
    return Payload(run, expected, (input, out), rtol=rtol, atol=atol)


def test_softmax_float64_and_special_values(device, implementation_index):
    softmax_checks.check_float64_and_special_values(OP, device, implementation_index)


def test_softmax_in_place_and_overlap(device, implementation_index):
    softmax_checks.check_in_place_and_overlap(OP, device, implementation_index)


def test_softmax_rejects_bad_arguments(device):
    softmax_checks.check_rejects_bad_arguments(OP, device)
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match="`softmax`: `dim` must be in \\[-2, 1\\]"):
        infini.ops.softmax(input, 2, None, torch.empty_like(input))
    with pytest.raises(ValueError, match="`softmax`: `out` has dtype float32 but"):
        infini.ops.softmax(input, 1, torch.float16, torch.empty_like(input))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        infini.ops.softmax(input, 1.0, None, torch.empty_like(input))
