import math

import pytest
import torch

import infini.ops
from tests import unary_checks as checks

OP = "gelu"


def _reference_none(input):
    # `x * Phi(x)` with `erfc`: `1 + erf(x / sqrt(2))` cancels to 0 in
    # float64 too for x < -8.3, where the true result is tiny but not 0.
    return 0.5 * input * torch.special.erfc(-input * math.sqrt(0.5))


def _reference_tanh(input):
    # `0.5 (1 + tanh(y)) = sigmoid(2 y)`, for the same reason.
    y = math.sqrt(2.0 / math.pi) * (input + 0.044715 * input**3)
    return input * torch.sigmoid(2.0 * y)


REFERENCES = {"none": _reference_none, "tanh": _reference_tanh}
# Exact GELU is computed in float64 and rounded once; the tanh form in
# float32, where the rounding of its argument `y` is amplified by `|y|`
# for negative inputs.
FLOAT32_TOLERANCES = {"none": (1e-6, 1e-7), "tanh": (1e-5, 1e-7)}
TANH_CASES = (
    ((13, 4), None, None, (checks.F32, checks.F16), True),
    ((13, 4), (1, 13), None, (checks.F32,), False),
)


def _params():
    for approximate, cases in (("none", checks.LEAN_CASES), ("tanh", TANH_CASES)):
        for param in checks.case_params(FLOAT32_TOLERANCES[approximate], cases):
            yield pytest.param(
                approximate, *param.values, marks=param.marks, id=param.id
            )


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_references_are_torch_gelu(approximate):
    input = torch.linspace(-8.0, 8.0, 1001, dtype=torch.float64)
    expected = torch.nn.functional.gelu(input, approximate=approximate)
    actual = REFERENCES[approximate](input)
    assert torch.allclose(actual, expected, rtol=1e-9, atol=1e-15)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "approximate, shape, input_strides, out_strides, dtype, rtol, atol",
    list(_params()),
)
def test_gelu(
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
        REFERENCES[approximate],
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


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gelu_special_values(approximate, dtype, device, implementation_index):
    rtol = 4e-7 if dtype == torch.float32 else 1e-14
    if approximate == "tanh" and dtype == torch.float32:
        rtol = 1e-5
    checks.check_special_values(
        OP,
        REFERENCES[approximate],
        (approximate,),
        dtype,
        device,
        implementation_index,
        rtol,
    )


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str
)
def test_gelu_none_huge_negative_inputs_give_negative_zero(
    dtype, device, implementation_index
):
    # Far below the tail erfc underflows; a split square whose error term
    # grows with |x| once turned these into 0 * inf = NaN.
    input = torch.tensor([-6e4, -4.295e4, -1e3, -60.0], dtype=dtype)
    if dtype != torch.float16:
        input = torch.cat([input, torch.tensor([-4.295e9, -1e30], dtype=dtype)])
    input = input.to(device)
    out = torch.full_like(input, float("nan"))
    checks.call(OP, input, out, ("none",), implementation_index)
    assert torch.equal(out, torch.zeros_like(out)), out
    if implementation_index == 8:
        # ATen's own sign of zero there depends on its code path (vector
        # width of the machine): the slot gives exactly what torch gives.
        expected = torch.nn.functional.gelu(input)
        assert torch.equal(out.signbit(), expected.signbit()), out
    else:
        assert out.signbit().all(), out


# The CPU kernel of exact GELU keeps a small relative error all the way
# down the negative tail: 4.1e-7 at worst over this sweep (`fma` rounds
# alike everywhere, so that is the same on every machine), bounded here at
# 1e-6. torch's own float32 `gelu` computes ``1 + erf``, which cancels
# there: against float64 it is 2.3e-4 off on [-3, -2), 7e-3 on [-4, -3),
# 0.27 on [-5, -4), and returns 0 below about -5.5 (torch 2.13, AVX-512).
@pytest.mark.parametrize(
    "approximate, low, rtol", [("none", -14.0, 1e-6), ("tanh", -12.0, 1e-5)]
)
def test_gelu_float32_sweep_against_float64(
    approximate, low, rtol, device, implementation_index
):
    checks.check_sweep(
        OP,
        REFERENCES[approximate],
        (approximate,),
        low,
        12.0,
        device,
        implementation_index,
        rtol,
        1e-30,
    )


def _ordered(values):
    """16-bit floats as integers in the order of their values (both zeros
    0): neighbouring values differ by 1."""
    bits = values.view(torch.int16).int()
    return torch.where(bits < 0, -(bits & 0x7FFF), bits)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gelu_none_16bit_every_input_within_an_ulp(dtype, device, implementation_index):
    """The CPU kernel computes 16-bit results to 8e-6 relative in float32
    (less than its float32 results need): rounded, each is the correctly
    rounded GELU or a neighbour, for every finite input. Below 4e-37,
    where `Phi(-|x|)` leaves float32's normal range, the result may flush
    to zero."""
    checks.skip_for_aten(implementation_index)
    if device != "cpu":
        pytest.skip("a claim about the CPU kernel's precision")
    input = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    input = input.view(dtype)
    input = input[input.isfinite()].to(device)
    out = torch.empty_like(input)
    checks.call(OP, input, out, ("none",), implementation_index)
    expected = _reference_none(input.double())
    rounded = expected.to(dtype)
    close = (_ordered(out) - _ordered(rounded)).abs() <= 1
    flushed = (expected.abs() < 4e-37) & (out.double().abs() < 4e-37)
    bad = ~(close | flushed)
    assert not bool(bad.any()), (input[bad][:8], out[bad][:8], rounded[bad][:8])


@pytest.mark.smoke
def test_gelu_in_place(device, implementation_index):
    checks.check_in_place(
        OP, _reference_none, ("none",), device, implementation_index, 1e-6
    )


def test_gelu_partially_overlapping_output_reads_input_first(
    device, implementation_index
):
    checks.check_partial_overlap(
        OP, _reference_tanh, ("tanh",), device, implementation_index, 1e-5
    )


def test_gelu_rejects_bad_arguments(device):
    checks.check_rejections(OP, ("none",), device)


@pytest.mark.parametrize("approximate", ["", "erf", "Tanh", "None"])
def test_gelu_rejects_unknown_approximation(approximate, device):
    input = torch.randn(4, 5, device=device)
    out = torch.full_like(input, 7.0)
    with pytest.raises(ValueError, match="`gelu`: `approximate` must be"):
        infini.ops.gelu(input, approximate, out)
    assert bool((out == 7.0).all())


def test_gelu_requires_approximate(device):
    input = torch.randn(4, 5, device=device)
    with pytest.raises(TypeError, match="`gelu`: incompatible function arguments"):
        infini.ops.gelu(input, torch.empty_like(input))
    with pytest.raises(TypeError, match="`gelu`: incompatible function arguments"):
        infini.ops.gelu(input, None, torch.empty_like(input))
