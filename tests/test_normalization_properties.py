"""Property tests of the normalisation operators on the CPU: random shapes,
strides (padded, transposed, broadcast) and dtypes against PyTorch.

Few examples, small shapes and the dtypes and layout classes (adjacent or
strided row elements) of the operators' own tests, so that the examples
mostly reuse the kernels those compile."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import infini.ops

TOLERANCES = {
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
}
SETTINGS = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def tensors(draw, min_ndim=1, max_ndim=3, dtypes=tuple(TOLERANCES)):
    """A random-valued tensor of a random shape and layout, and its dtype."""
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    shape = shape[:-1] + (draw(st.integers(1, 70)),) if ndim else shape
    dtype = draw(st.sampled_from(dtypes))
    layout = draw(st.sampled_from(["contiguous", "padded", "transposed", "broadcast"]))
    if layout == "padded" and ndim:
        base = torch.randn(*shape[:-1], shape[-1] * 2, dtype=dtype)
        tensor = base[..., ::2]
    elif layout == "transposed" and ndim >= 2:
        tensor = torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=dtype)
        tensor = tensor.transpose(-1, -2)
    elif layout == "broadcast" and ndim >= 2:
        tensor = torch.randn(1, *shape[1:], dtype=dtype).expand(shape)
    else:
        tensor = torch.randn(shape, dtype=dtype)
    return tensor


def _rms(x, weight, eps):
    x = x.double()
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * weight.double()


def _close(out, expected):
    rtol, atol = TOLERANCES[out.dtype]
    assert torch.allclose(out, expected.to(out.dtype), rtol=rtol, atol=atol)


@SETTINGS
@given(input=tensors(), eps=st.sampled_from([1e-6, 1e-5, 0.1]))
def test_rms_norm_matches_torch(input, eps):
    weight = torch.randn(input.shape[-1], dtype=input.dtype)
    out = torch.empty(input.shape, dtype=input.dtype)
    infini.ops.rms_norm(input, weight, eps, out)
    _close(out, _rms(input, weight, eps))


@SETTINGS
@given(input=tensors(), data=st.data())
def test_add_rms_norm_matches_torch(input, data):
    residual = data.draw(tensors(input.ndim, input.ndim, (input.dtype,)))
    residual = torch.randn(input.shape, dtype=input.dtype) if (
        residual.shape != input.shape
    ) else residual  # fmt: skip
    weight = torch.randn(input.shape[-1], dtype=input.dtype)
    out = torch.empty(input.shape, dtype=input.dtype)
    residual_out = torch.empty_like(out)
    infini.ops.add_rms_norm(input, residual, weight, out, residual_out)
    total = input.float() + residual.float()
    _close(out, _rms(total, weight, 1e-6))
    _close(residual_out, total)


@SETTINGS
@given(input=tensors(), with_weight=st.booleans())
def test_fused_add_rms_norm_matches_torch(input, with_weight):
    input = input.contiguous() if input.stride()[:1] == (0,) else input.clone()
    residual = torch.randn(input.shape, dtype=input.dtype)
    weight = torch.randn(input.shape[-1], dtype=input.dtype) if with_weight else None
    total = (input.float() + residual.float()).to(input.dtype)
    expected = _rms(total, weight if with_weight else torch.ones(1), 1e-6)
    infini.ops.fused_add_rms_norm(input, residual, weight, 1e-6)
    _close(residual, total)
    _close(input, expected)


@SETTINGS
@given(input=tensors(min_ndim=0), data=st.data())
def test_softmax_matches_torch(input, data):
    rank = max(input.ndim, 1)
    dim = data.draw(st.integers(-rank, rank - 1))
    out = torch.empty(input.shape, dtype=input.dtype)
    infini.ops.softmax(input, dim, None, out)
    _close(out, torch.softmax(input.double(), dim))


@SETTINGS
@given(input=tensors(min_ndim=2))
def test_causal_softmax_matches_torch(input):
    out = torch.empty(input.shape, dtype=input.dtype)
    infini.ops.causal_softmax(input, out)
    q, k = input.shape[-2:]
    masked = torch.ones(q, k, dtype=torch.bool).triu(k - q + 1)
    expected = torch.softmax(input.double().masked_fill(masked, -torch.inf), -1)
    rtol, atol = TOLERANCES[out.dtype]
    assert torch.allclose(out, expected.to(out.dtype), rtol, atol, equal_nan=True)


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
