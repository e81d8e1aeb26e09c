import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: the sum of squares runs in another order than the float64
# reference (vector lanes), a few ulps on the scale. 16-bit results round
# once from float32; a float32 difference can flip that rounding by one
# ulp, 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-6, 1e-6),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# input shape, input strides, weight strides, out strides, eps, smoke
CASES = (
    ((1, 64), None, None, None, 1e-6, True),
    ((2, 4, 2048), None, None, None, 1e-6, True),
    ((2, 4, 2048), None, None, None, None, False),
    ((13, 33), (40, 1), (2,), (1, 13), 1e-5, False),
    ((13, 33), (1, 13), (0,), None, 1e-6, False),
    ((3, 5, 33), (0, 33, 1), None, (200, 40, 1), 1e-6, False),
    ((4097,), None, None, None, 1e-6, False),
    ((64, 4097), None, None, None, 1e-6, False),
    ((0, 64), None, None, None, 1e-6, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _rms_norm(input, weight, out, eps, implementation_index):
    if eps is None:
        infini.ops.rms_norm(
            input, weight, out, implementation_index=implementation_index
        )
    else:
        infini.ops.rms_norm(
            input, weight, eps, out, implementation_index=implementation_index
        )
    return out


def _torch_rms_norm(input, weight, out, eps, implementation_index):
    eps = 1e-6 if eps is None else eps
    x = input.double()
    result = x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * weight.double()
    return result.to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, weight_strides, out_strides, eps, dtype, rtol, atol",
    list(_params()),
)
def test_rms_norm(
    shape,
    input_strides,
    weight_strides,
    out_strides,
    eps,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    weight = randn_strided(shape[-1:], weight_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _rms_norm,
        _torch_rms_norm,
        (input, weight, out, eps, implementation_index),
        rtol=rtol,
        atol=atol,
    )


@pytest.mark.parametrize(
    "dtype, weight_dtype, rtol",
    [
        (torch.float64, torch.float64, 1e-12),
        (torch.float16, torch.float32, 1e-3),
        (torch.bfloat16, torch.float32, 1e-2),
    ],
)
def test_rms_norm_other_dtypes(dtype, weight_dtype, rtol, device, implementation_index):
    input = torch.randn(5, 7, 96, dtype=dtype, device=device)
    weight = torch.randn(96, dtype=weight_dtype, device=device)
    out = torch.empty_like(input)
    _rms_norm(input, weight, out, 1e-5, implementation_index)
    expected = _torch_rms_norm(input, weight, out, 1e-5, None)
    assert torch.allclose(out, expected, rtol=rtol, atol=rtol)


def test_rms_norm_in_place(device, implementation_index):
    input = torch.randn(33, 17, device=device)
    weight = torch.randn(17, device=device)
    expected = _torch_rms_norm(input, weight, input, None, None)
    _rms_norm(input, weight, input, None, implementation_index)
    assert torch.allclose(input, expected, rtol=1e-6, atol=1e-6)


def test_rms_norm_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    storage = torch.randn(40 * 32, device=device)
    input = storage[: 32 * 32].view(32, 32)
    weight = torch.randn(32, device=device)
    expected = _torch_rms_norm(input, weight, input, None, None)
    out = storage[8 * 32 :].view(32, 32).t()
    _rms_norm(input, weight, out, None, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_rms_norm_output_overlapping_weight_reads_it_first(
    device, implementation_index
):
    input = torch.randn(8, 16, device=device)
    storage = torch.randn(8 * 16, device=device)
    weight = storage[:16]
    expected = _torch_rms_norm(input, weight, input, None, None)
    out = storage.view(8, 16)
    _rms_norm(input, weight, out, None, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_rms_norm_large_rows_run_in_parallel(device, implementation_index):
    input = torch.randn(512, 1024, device=device)[:, ::2]
    weight = torch.randn(512, device=device)
    out = torch.empty(512, 512, device=device)
    _rms_norm(input, weight, out, 1e-6, implementation_index)
    expected = _torch_rms_norm(input, weight, out, 1e-6, None)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "input_shape, weight_shape, out_shape, match",
    [
        ((4, 64), (63,), (4, 64), "`weight` must have shape \\(64,\\) to match"),
        ((4, 64), (1, 64), (4, 64), "`weight` must have 1 dimensions"),
        ((4, 64), (64,), (4, 63), "`out` must have shape \\(4, 64\\)"),
        ((), (1,), (), "`input` must have at least 1 dimension"),
    ],
)
def test_rms_norm_rejects_bad_shapes_without_writing(
    input_shape, weight_shape, out_shape, match, device
):
    input = torch.randn(input_shape, device=device)
    weight = torch.randn(weight_shape, device=device)
    out = torch.full(out_shape, 7.0, device=device)
    with pytest.raises(ValueError, match=f"`rms_norm`: {match}"):
        infini.ops.rms_norm(input, weight, 1e-6, out)
    assert bool((out == 7.0).all())


def test_rms_norm_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 8, device=device)
    weight = torch.randn(8, device=device)
    out = torch.empty(4, 8, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="`rms_norm`: `out` has dtype float16"):
        infini.ops.rms_norm(input, weight, out)


def test_rms_norm_rejects_unsupported_dtype(device):
    input = torch.ones(4, 8, dtype=torch.int32, device=device)
    weight = torch.ones(8, device=device)
    with pytest.raises(ValueError, match="`rms_norm`: `input` has dtype int32"):
        infini.ops.rms_norm(input, weight, torch.empty_like(input))


def test_rms_norm_rejects_broadcast_output(device):
    input = torch.randn(4, 8, device=device)
    weight = torch.randn(8, device=device)
    out = torch.empty(1, 8, device=device).expand(4, 8)
    with pytest.raises(
        ValueError, match="`rms_norm`: `out` is written but has a stride-0"
    ):
        infini.ops.rms_norm(input, weight, out)


def test_rms_norm_rejects_non_tensor_arguments(device):
    input = torch.randn(4, 8, device=device)
    with pytest.raises(ValueError, match="`rms_norm`: `weight` must be a tensor"):
        infini.ops.rms_norm(input, [1.0] * 8, 1e-6, torch.empty_like(input))
    with pytest.raises(TypeError, match="`rms_norm`: incompatible function arguments"):
        infini.ops.rms_norm(input, input[0], "1e-6", torch.empty_like(input))
