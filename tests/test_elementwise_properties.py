"""Property tests of the CPU elementwise family: random shapes, layouts
(permuted, padded, broadcast with stride 0) and dtypes against PyTorch.

They exercise the shared planning (broadcasting, dimension ordering and
coalescing, row plans, staging of overlapping outputs) that every
elementwise operator goes through. Examples are few and tensors small (the
serial kernels), and runs are derandomised so that CI is reproducible.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import infini.ops

SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Two dtypes per operator keep the kernels compiled per run few.
DTYPES = (torch.float32, torch.bfloat16)
TOLERANCES = {
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
}

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@st.composite
def laid_out(draw, shape, dtype, broadcast=False):
    """A random tensor of `shape`: dimensions in a random memory order,
    rows padded, and (when `broadcast`) some dimensions of stride 0."""
    ndim = len(shape)
    order = draw(st.permutations(range(ndim)))
    pads = draw(st.lists(st.integers(0, 2), min_size=ndim, max_size=ndim))
    expand = (
        draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))
        if broadcast
        else [False] * ndim
    )
    sizes = [1 if expand[d] else shape[d] + pads[d] for d in range(ndim)]
    base = (torch.randn([sizes[d] for d in order]) * 3).to(dtype)
    view = base.permute([order.index(d) for d in range(ndim)])
    view = view[tuple(slice(0, 1 if expand[d] else shape[d]) for d in range(ndim))]
    return view.expand(shape) if ndim else view


def check_close(out, expected):
    rtol, atol = TOLERANCES[out.dtype]
    expected = expected.to(out.dtype)
    assert out.shape == expected.shape
    assert torch.allclose(out, expected, rtol=rtol, atol=atol, equal_nan=True), (
        (out.double() - expected.double()).abs().max()
    )


def _gelu_tanh(x):
    y = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return x * torch.sigmoid(2.0 * y)


UNARY = {
    "relu": ((), torch.relu),
    "silu": ((), torch.nn.functional.silu),
    "sigmoid": ((), torch.sigmoid),
    "gelu": (("none",), lambda x: 0.5 * x * torch.special.erfc(-x * math.sqrt(0.5))),
    "gelu_tanh": (("tanh",), _gelu_tanh),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(data=st.data(), shape=shapes, in_place=st.booleans())
def test_unary_matches_torch(name, data, shape, in_place):
    scalars, reference = UNARY[name]
    dtype = data.draw(st.sampled_from(DTYPES))
    input = data.draw(laid_out(shape, dtype, broadcast=not in_place))
    out = input if in_place else data.draw(laid_out(shape, dtype))
    expected = reference(input.double())
    getattr(infini.ops, name.split("_")[0])(input, *scalars, out)
    check_close(out, expected)


BINARY = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "swiglu": lambda a, b: a * torch.nn.functional.silu(b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(data=st.data(), shape=shapes)
def test_binary_matches_torch(name, data, shape):
    dtype = data.draw(st.sampled_from(DTYPES))
    # The second input drops a random number of leading dimensions (`out`
    # must have the broadcast shape of the inputs, so one keeps them all).
    second = shape[data.draw(st.integers(0, len(shape))) :]
    input = data.draw(laid_out(shape, dtype, broadcast=True))
    other = data.draw(laid_out(second, dtype, broadcast=True))
    if data.draw(st.booleans()):
        input, other = other, input
    out = data.draw(laid_out(shape, dtype))
    expected = BINARY[name](input.double(), other.double()).expand(shape)
    getattr(infini.ops, name)(input, other, out)
    check_close(out, expected)


@SETTINGS
@given(data=st.data(), shape=shapes, half=st.integers(0, 4))
def test_silu_and_mul_matches_torch(data, shape, half):
    dtype = data.draw(st.sampled_from(DTYPES))
    input = data.draw(laid_out(shape + (2 * half,), dtype))
    out = data.draw(laid_out(shape + (half,), dtype))
    x = input.double()
    expected = torch.nn.functional.silu(x[..., :half]) * x[..., half:]
    infini.ops.silu_and_mul(input, out)
    check_close(out, expected)


CAST_PAIRS = (
    (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.float32),
    (torch.float32, torch.int32),
    (torch.float16, torch.float16),
)


@SETTINGS
@given(data=st.data(), shape=shapes, pair=st.sampled_from(CAST_PAIRS))
def test_cast_matches_torch(data, shape, pair):
    source, destination = pair
    input = data.draw(laid_out(shape, source, broadcast=True))
    out = data.draw(laid_out(shape, destination))
    infini.ops.cast(input, out)
    # Conversions are exact functions of the input: bit for bit.
    assert torch.equal(out, input.to(destination))
