import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: `exp` and the two roundings of `x / (1 + exp(-x)) * y` land
# within two ulps of the float64 reference. 16-bit results round once from
# float32; a float32 difference can flip that rounding by one ulp, 2^-8
# relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-6, 1e-7),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# out shape, input strides, out strides, smoke (`input` is `out` with a
# last dimension twice as long)
CASES = (
    ((13, 4), None, None, True),
    ((16, 5632), None, None, True),
    ((13, 4), (10, 1), (10, 1), False),
    ((13, 4), (1, 13), (1, 13), False),
    ((13, 4, 4), (0, 8, 1), None, False),
    ((4097,), None, None, False),
    ((1,), (3,), None, False),
    ((0, 5), None, None, False),
    ((5, 0), None, None, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _silu_and_mul(input, out, implementation_index):
    infini.ops.silu_and_mul(input, out, implementation_index=implementation_index)
    return out


def _torch_silu_and_mul(input, out, implementation_index):
    x = input.double()
    half = x.shape[-1] // 2
    result = torch.nn.functional.silu(x[..., :half]) * x[..., half:]
    return result.to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "out_shape, input_strides, out_strides, dtype, rtol, atol", list(_params())
)
def test_silu_and_mul(
    out_shape,
    input_strides,
    out_strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input_shape = out_shape[:-1] + (2 * out_shape[-1],)
    input = randn_strided(input_shape, input_strides, dtype=dtype, device=device)
    out = empty_strided(out_shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _silu_and_mul,
        _torch_silu_and_mul,
        (input, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_silu_and_mul_float64(device, implementation_index):
    input = torch.randn(3, 7, 66, dtype=torch.float64, device=device)
    out = torch.empty(3, 7, 33, dtype=torch.float64, device=device)
    _silu_and_mul(input, out, implementation_index)
    expected = torch.nn.functional.silu(input[..., :33]) * input[..., 33:]
    assert torch.allclose(out, expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize(
    "start", [0, 4, 2], ids=["first-half", "second-half", "middle"]
)
def test_silu_and_mul_output_inside_input_reads_it_first(
    start, device, implementation_index
):
    input = torch.randn(33, 8, device=device)
    expected = torch.nn.functional.silu(input[:, :4]) * input[:, 4:]
    out = input[:, start : start + 4]
    _silu_and_mul(input, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7)


def test_silu_and_mul_rejects_odd_last_dimension_without_writing(device):
    input = torch.randn(4, 7, device=device)
    out = torch.full((4, 3), 7.0, device=device)
    with pytest.raises(
        ValueError, match="`silu_and_mul`: the last dimension of `input` must be even"
    ):
        infini.ops.silu_and_mul(input, out)
    assert bool((out == 7.0).all())


@pytest.mark.parametrize(
    "input_shape, out_shape, match",
    [
        ((4, 8), (4, 8), "`out` must have shape \\(4, 4\\)"),
        ((2, 4, 8), (8, 4), "`out` must have shape \\(2, 4, 4\\)"),
        ((), (), "`input` must have at least 1 dimension"),
    ],
)
def test_silu_and_mul_rejects_bad_shapes(input_shape, out_shape, match, device):
    input = torch.randn(input_shape, device=device)
    out = torch.full(out_shape, 7.0, device=device)
    with pytest.raises(ValueError, match=f"`silu_and_mul`: {match}"):
        infini.ops.silu_and_mul(input, out)
    assert bool((out == 7.0).all())


def test_silu_and_mul_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 8, device=device)
    out = torch.empty(4, 4, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="`silu_and_mul`: `out` has dtype bfloat16"):
        infini.ops.silu_and_mul(input, out)


def test_silu_and_mul_rejects_unsupported_dtype(device):
    input = torch.ones(4, 8, dtype=torch.int64, device=device)
    out = torch.empty(4, 4, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="`silu_and_mul`: `input` has dtype int64"):
        infini.ops.silu_and_mul(input, out)


def test_silu_and_mul_rejects_broadcast_output(device):
    input = torch.randn(4, 8, device=device)
    out = torch.empty(1, 4, device=device).expand(4, 4)
    with pytest.raises(
        ValueError, match="`silu_and_mul`: `out` is written but has a stride-0"
    ):
        infini.ops.silu_and_mul(input, out)


def test_silu_and_mul_rejects_non_tensor_arguments(device):
    with pytest.raises(ValueError, match="`silu_and_mul`: `input` must be a tensor"):
        infini.ops.silu_and_mul([1.0, 2.0], torch.empty(1, device=device))
    with pytest.raises(
        TypeError, match="`silu_and_mul`: incompatible function arguments"
    ):
        infini.ops.silu_and_mul(torch.randn(4, 8, device=device))
