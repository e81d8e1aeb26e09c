import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# The kernels are `silu_and_mul`'s (tested there in depth).
DTYPES = (
    (torch.float32, 1e-6, 1e-7),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)


def _silu_and_mul_infinilm(input, out, implementation_index):
    infini.ops.silu_and_mul_infinilm(
        input, out, implementation_index=implementation_index
    )
    return out


def _reference(input, out, implementation_index):
    half = input.shape[-1] // 2
    x = input.double()
    result = torch.nn.functional.silu(x[..., :half]) * x[..., half:]
    return result.to(out.dtype)


def _params():
    # Strided layouts in float32 only: each dtype and layout compiles a kernel.
    layouts = (
        ((13, 8), None, None, True),
        ((13, 8), (1, 13), None, False),
        ((4, 2, 16), None, (16, 8, 1), False),
        ((16, 11264), None, None, False),
        ((0, 8), None, None, False),
    )
    for shape, input_strides, out_strides, smoke in layouts:
        for dtype, rtol, atol in DTYPES:
            if dtype == torch.float32 or (input_strides is None and shape[-1] < 64):
                marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
                yield pytest.param(
                    shape, input_strides, out_strides, dtype, rtol, atol, marks=marks
                )


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "input_shape, input_strides, out_strides, dtype, rtol, atol", list(_params())
)
def test_silu_and_mul_infinilm(
    input_shape,
    input_strides,
    out_strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(input_shape, input_strides, dtype=dtype, device=device)
    out_shape = input_shape[:-1] + (input_shape[-1] // 2,)
    out = empty_strided(out_shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _silu_and_mul_infinilm,
        _reference,
        (input, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_silu_and_mul_infinilm_output_overlapping_first_half(
    device, implementation_index
):
    input = torch.randn(9, 34, device=device)
    expected = torch.nn.functional.silu(input[:, :17]) * input[:, 17:]
    _silu_and_mul_infinilm(input, input[:, :17], implementation_index)
    assert torch.allclose(input[:, :17], expected, rtol=1e-6, atol=1e-7)


def test_silu_and_mul_infinilm_rejects_bad_arguments(device):
    input = torch.randn(4, 6, device=device)
    with pytest.raises(ValueError, match="`silu_and_mul_infinilm`: the last dim"):
        infini.ops.silu_and_mul_infinilm(
            torch.randn(4, 5, device=device), torch.empty(4, 2, device=device)
        )
    out = torch.full((4, 2), 7.0, device=device)
    with pytest.raises(ValueError, match="`silu_and_mul_infinilm`: `out` must have"):
        infini.ops.silu_and_mul_infinilm(input, out)
    assert bool((out == 7.0).all())
    with pytest.raises(ValueError, match="`silu_and_mul_infinilm`: `input` has dtype"):
        integer = torch.ones(4, 6, dtype=torch.int32, device=device)
        infini.ops.silu_and_mul_infinilm(integer, integer[:, :3])
