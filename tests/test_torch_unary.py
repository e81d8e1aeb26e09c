"""The unary ATen operators with their own bases in the original (docs/behaviour.md,
"ATen schemas and types"), at slot 8: strided inputs, the three float dtypes, special
values."""

import math

import pytest
import torch
import torch.nn.functional as F

import infini.ops
from tests.conftest import get_available_devices

UNARY = (
    "abs absolute acos acosh arccos arccosh arcsin arcsinh arctan arctanh asin "
    "asinh atan atanh ceil cos cosh deg2rad erf erfc erfinv exp exp2 expm1 fix "
    "floor frac hardsigmoid hardswish log log10 log1p log2 log_sigmoid neg "
    "negative rad2deg reciprocal rsqrt sgn sign sin sinc sinh sqrt square tan tanh "
    "trunc"
).split()
SMOKE = ("abs", "exp")
TOLERANCES = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def _reference(name, input):
    if name == "log_sigmoid":
        return F.logsigmoid(input.double()).to(input.dtype)
    function = getattr(torch, name, None) or getattr(F, name)
    return function(input.double()).to(input.dtype)


def _inputs(name, shape, dtype, device):
    x = torch.randn(shape, dtype=torch.float64, device=device) * 2
    if name in ("acosh", "arccosh"):
        x = x.abs() + 1
    if name in ("erfinv", "atanh", "arctanh", "acos", "asin", "arccos", "arcsin"):
        x = torch.tanh(x) * 0.95
    return x.to(dtype)


@pytest.mark.parametrize("torch_device", get_available_devices())
@pytest.mark.parametrize("dtype", list(TOLERANCES), ids=str)
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.smoke) if n in SMOKE else n for n in UNARY],
)
def test_unary(name, dtype, torch_device):
    cls = getattr(
        infini.ops, "".join(p[:1].upper() + p[1:] for p in name.split("_")), None
    )
    if cls is None or 8 not in cls.active_implementation_indices(torch_device):
        pytest.skip(f"`{name}` has no slot 8 on {torch_device} in this build")
    # A transposed (strided) input into a contiguous output.
    input = _inputs(name, (4, 13), dtype, torch_device).t()
    out = torch.empty(13, 4, dtype=dtype, device=torch_device)
    assert getattr(infini.ops, name)(input, out, implementation_index=8) is None
    expected = _reference(name, input)
    tolerance = TOLERANCES[dtype]
    assert torch.allclose(out, expected, rtol=tolerance, atol=tolerance, equal_nan=True)


@pytest.mark.parametrize("torch_device", get_available_devices())
def test_unary_special_values(torch_device):
    if not hasattr(infini.ops, "Log"):
        pytest.skip("`log` is not in this build")
    values = torch.tensor(
        [0.0, -0.0, -1.0, math.inf, -math.inf, math.nan], device=torch_device
    )
    for name in ("log", "sqrt", "exp", "reciprocal", "sign", "abs"):
        out = torch.empty_like(values)
        getattr(infini.ops, name)(values, out, implementation_index=8)
        expected = getattr(torch, name)(values)
        assert torch.equal(out.isnan(), expected.isnan()), name
        keep = ~expected.isnan()
        assert torch.equal(out[keep], expected[keep]), name


def test_unary_out_may_alias_input():
    if not hasattr(infini.ops, "Exp"):
        pytest.skip("`exp` is not in this build")
    storage = torch.randn(64)
    expected = storage[:48].exp()
    # `out` overlaps `input` shifted by 16 elements: inputs are read first.
    infini.ops.exp(storage[:48], storage[16:], implementation_index=8)
    assert torch.allclose(storage[16:], expected)
    x = torch.randn(5, 7)
    expected = x.exp()
    infini.ops.exp(x, x, implementation_index=8)
    assert torch.allclose(x, expected)


def test_unary_rejects_unsigned_dtypes_clearly():
    if not hasattr(infini.ops, "Exp"):
        pytest.skip("`exp` is not in this build")
    x = torch.ones(3, dtype=torch.uint32)
    with pytest.raises(ValueError, match=r"`exp`: the ATen implementation.*uint32"):
        infini.ops.exp(x, torch.empty_like(x), implementation_index=8)


def test_unary_trace_names_and_dispatch():
    if not hasattr(infini.ops, "SpecialErfinv"):
        pytest.skip("`special_erfinv` is not in this build")
    assert infini.ops.Abs.active_implementation_indices("cpu") == [8]
    x = torch.rand(6) - 0.5
    out = torch.empty(6)
    infini.ops.special_erfinv(x, out)  # the default slot is 8
    assert torch.allclose(out, torch.special.erfinv(x))
    assert (
        "special_erfinv(input: Tensor, out: Tensor!"
        in infini.ops.special_erfinv.__doc__
    )
