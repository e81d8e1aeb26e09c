import math

import pytest
import torch
import torch.nn.functional as F

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: the tanh GELU's argument rounds once to float32, an error that
# `sigmoid` amplifies by up to `|y|` for negative inputs (as for `gelu`'s
# tanh form), then two roundings of the products. 16-bit results round once
# from float32; a float32 difference can flip that rounding by one ulp.
DTYPES = (
    (torch.float32, 1e-5, 1e-7),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# out shape, input strides, out strides, smoke (`input` is `out` with a
# last dimension twice as long)
CASES = (
    ((13, 4), None, None, True),
    ((5, 2048), None, None, True),  # Gemma-3 270M's FFN
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


def _gelu_tanh_and_mul(input, out, implementation_index):
    infini.ops.gelu_tanh_and_mul(input, out, implementation_index=implementation_index)
    return out


def _reference(input):
    x = input.double()
    half = x.shape[-1] // 2
    return F.gelu(x[..., :half], approximate="tanh") * x[..., half:]


def _exact_reference(input):
    """The tanh GELU as ``x * sigmoid(2 y)`` in float64: `F.gelu`'s ``1 +
    tanh(y)`` cancels in float64 too once ``|y| > 13`` (x < -5.5), where
    the true product is tiny but far from 0."""
    x = input.double()
    half = x.shape[-1] // 2
    gate = x[..., :half]
    y = math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate**3)
    return gate * torch.sigmoid(2.0 * y) * x[..., half:]


def _torch_gelu_tanh_and_mul(input, out, implementation_index):
    return _reference(input).to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "out_shape, input_strides, out_strides, dtype, rtol, atol", list(_params())
)
def test_gelu_tanh_and_mul(
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
        _gelu_tanh_and_mul,
        _torch_gelu_tanh_and_mul,
        (input, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_gelu_tanh_and_mul_float64(device, implementation_index):
    input = torch.randn(3, 7, 66, dtype=torch.float64, device=device)
    out = torch.empty(3, 7, 33, dtype=torch.float64, device=device)
    _gelu_tanh_and_mul(input, out, implementation_index)
    assert torch.allclose(out, _reference(input), rtol=1e-12, atol=1e-15)


def test_gelu_tanh_and_mul_float32_sweep_against_float64(device, implementation_index):
    """Gates over [-12, 12], the negative tail included (where ``1 +
    tanh(y)`` would cancel), times an up half of ones and of -3. vLLM's CPU
    kernel (slot 16) computes ``1 + tanh(y)`` in float32, which loses digits
    below -2 (all of them below -9): it is held to [-2, 12]."""
    low = -2.0 if implementation_index == 16 else -12.0
    gate = torch.linspace(low, 12.0, 4001, device=device)
    for up in (1.0, -3.0):
        input = torch.cat([gate, torch.full_like(gate, up)]).view(1, -1)
        out = torch.empty(1, gate.numel(), device=device)
        _gelu_tanh_and_mul(input, out, implementation_index)
        expected = _exact_reference(input)
        assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-30)


def test_gelu_tanh_and_mul_differs_from_exact_gelu(device, implementation_index):
    """The tanh approximation, not the erf GELU: at x = 1 they differ by
    1.6e-4, far beyond float32 rounding."""
    input = torch.tensor([[1.0, 1.0]], device=device)
    out = torch.empty(1, 1, device=device)
    _gelu_tanh_and_mul(input, out, implementation_index)
    tanh = float(F.gelu(torch.tensor(1.0, dtype=torch.float64), approximate="tanh"))
    assert abs(float(out) - tanh) < 1e-6
    assert abs(float(out) - float(F.gelu(torch.tensor(1.0)))) > 1e-4


@pytest.mark.parametrize(
    "start", [0, 4, 2], ids=["first-half", "second-half", "middle"]
)
def test_gelu_tanh_and_mul_output_inside_input_reads_it_first(
    start, device, implementation_index
):
    input = torch.randn(33, 8, device=device)
    expected = _reference(input)
    out = input[:, start : start + 4]
    _gelu_tanh_and_mul(input, out, implementation_index)
    assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-7)


def test_gelu_tanh_and_mul_rejects_odd_last_dimension_without_writing(device):
    input = torch.randn(4, 7, device=device)
    out = torch.full((4, 3), 7.0, device=device)
    with pytest.raises(
        ValueError,
        match="`gelu_tanh_and_mul`: the last dimension of `input` must be even",
    ):
        infini.ops.gelu_tanh_and_mul(input, out)
    assert bool((out == 7.0).all())


@pytest.mark.parametrize(
    "input_shape, out_shape, match",
    [
        ((4, 8), (4, 8), "`out` must have shape \\(4, 4\\)"),
        ((2, 4, 8), (8, 4), "`out` must have shape \\(2, 4, 4\\)"),
        ((), (), "`input` must have at least 1 dimension"),
    ],
)
def test_gelu_tanh_and_mul_rejects_bad_shapes(input_shape, out_shape, match, device):
    input = torch.randn(input_shape, device=device)
    out = torch.full(out_shape, 7.0, device=device)
    with pytest.raises(ValueError, match=f"`gelu_tanh_and_mul`: {match}"):
        infini.ops.gelu_tanh_and_mul(input, out)
    assert bool((out == 7.0).all())


def test_gelu_tanh_and_mul_rejects_bad_dtypes(device):
    input = torch.randn(4, 8, device=device)
    out = torch.empty(4, 4, dtype=torch.bfloat16, device=device)
    with pytest.raises(
        ValueError, match="`gelu_tanh_and_mul`: `out` has dtype bfloat16"
    ):
        infini.ops.gelu_tanh_and_mul(input, out)
    input = torch.ones(4, 8, dtype=torch.int64, device=device)
    out = torch.empty(4, 4, dtype=torch.int64, device=device)
    with pytest.raises(
        ValueError, match="`gelu_tanh_and_mul`: `input` has dtype int64"
    ):
        infini.ops.gelu_tanh_and_mul(input, out)


def test_gelu_tanh_and_mul_rejects_broadcast_output(device):
    input = torch.randn(4, 8, device=device)
    out = torch.empty(1, 4, device=device).expand(4, 4)
    with pytest.raises(
        ValueError, match="`gelu_tanh_and_mul`: `out` is written but has a stride-0"
    ):
        infini.ops.gelu_tanh_and_mul(input, out)


def test_gelu_tanh_and_mul_rejects_missing_output(device):
    with pytest.raises(
        TypeError, match="`gelu_tanh_and_mul`: incompatible function arguments"
    ):
        infini.ops.gelu_tanh_and_mul(torch.randn(4, 8, device=device))
