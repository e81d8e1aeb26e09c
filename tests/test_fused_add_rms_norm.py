import pytest
import torch

import infini.ops
from tests.utils import Payload, randn_strided

DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# shape, input strides, residual strides, has weight, smoke
CASES = (
    ((1, 64), None, None, True, True),
    ((2, 4, 2048), None, None, True, True),
    ((7, 96), None, None, False, False),
    ((13, 33), (40, 1), (1, 13), True, False),
    ((0, 64), None, None, True, False),
)


def _roundings(index):
    """How many times an implementation rounds the normalised row: vLLM's
    (the linked slots, 16 and up) rounds it to the 16-bit type before the
    weight multiplies it, and without AVX-512 it truncates 16-bit results,
    so its error reaches about twice ours."""
    return 2 if index >= 16 else 1


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            if case[1] is not None and dtype == torch.float16:
                continue  # strided layouts: float32 and bfloat16 suffice
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _fused_add_rms_norm(input, residual, weight, epsilon, index):
    result = infini.ops.fused_add_rms_norm(
        input, residual, weight, epsilon, implementation_index=index
    )
    assert result is None
    return input, residual


def _torch_fused_add_rms_norm(input, residual, weight, epsilon, index):
    # vLLM: the sum is rounded into `residual`, which is then normalised.
    wide = torch.float64 if input.dtype == torch.float64 else torch.float32
    total = (input.to(wide) + residual.to(wide)).to(residual.dtype)
    x = total.double()
    normed = x / torch.sqrt(x.square().mean(-1, keepdim=True) + epsilon)
    if weight is not None:
        normed = normed * weight.double()
    return normed.to(input.dtype), total


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, residual_strides, has_weight, dtype, rtol, atol",
    list(_params()),
)
def test_fused_add_rms_norm(
    shape,
    input_strides,
    residual_strides,
    has_weight,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    residual = randn_strided(shape, residual_strides, dtype=dtype, device=device)
    weight = torch.randn(shape[-1], dtype=dtype, device=device) if has_weight else None
    return Payload(
        _fused_add_rms_norm,
        _torch_fused_add_rms_norm,
        (input, residual, weight, 1e-6, implementation_index),
        rtol=rtol * _roundings(implementation_index),
        atol=atol * _roundings(implementation_index),
    )


def test_fused_add_rms_norm_float64_and_keywords(device, implementation_index):
    input = torch.randn(3, 5, 96, dtype=torch.float64, device=device)
    residual = torch.randn_like(input)
    weight = torch.randn(96, dtype=torch.float64, device=device)
    expected = _torch_fused_add_rms_norm(input, residual, weight, 1e-5, 0)
    infini.ops.fused_add_rms_norm(
        input=input,
        residual=residual,
        weight=weight,
        epsilon=1e-5,
        implementation_index=implementation_index,
    )
    assert torch.allclose(input, expected[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(residual, expected[1])


def test_fused_add_rms_norm_weight_in_written_memory_is_read_first(
    device, implementation_index
):
    storage = torch.randn(9 * 32, device=device)
    input = storage[: 8 * 32].view(8, 32)
    residual = torch.randn(8, 32, device=device)
    weight = storage[:32]
    expected = _torch_fused_add_rms_norm(input, residual, weight.clone(), 1e-6, 0)
    _fused_add_rms_norm(input, residual, weight, 1e-6, implementation_index)
    assert torch.allclose(input, expected[0], rtol=1e-5, atol=1e-5)


def test_fused_add_rms_norm_large_rows_run_in_parallel(device, implementation_index):
    input = torch.randn(256, 512, dtype=torch.bfloat16, device=device)
    residual = torch.randn(256, 512, dtype=torch.bfloat16, device=device)
    weight = torch.randn(512, dtype=torch.bfloat16, device=device)
    expected = _torch_fused_add_rms_norm(input, residual, weight, 1e-6, 0)
    _fused_add_rms_norm(input, residual, weight, 1e-6, implementation_index)
    tolerance = 1e-2 * _roundings(implementation_index)
    assert torch.allclose(input, expected[0], rtol=tolerance, atol=tolerance)
    if implementation_index >= 16:
        # vLLM's CPU kernel without AVX-512 truncates the 16-bit sum instead
        # of rounding it: within one unit in the last place.
        torch.testing.assert_close(residual, expected[1], rtol=2**-7, atol=0)
    else:
        assert torch.equal(residual, expected[1])


def test_fused_add_rms_norm_rejects_bad_arguments_without_writing(device):
    input = torch.full((4, 64), 7.0, device=device)
    residual = torch.full((4, 64), 7.0, device=device)
    with pytest.raises(
        ValueError, match="`fused_add_rms_norm`: `weight` must have shape \\(64,\\)"
    ):
        infini.ops.fused_add_rms_norm(input, residual, torch.ones(63), 1e-6)
    with pytest.raises(
        ValueError, match="`fused_add_rms_norm`: `residual` must have shape \\(4, 64\\)"
    ):
        infini.ops.fused_add_rms_norm(input, torch.ones(4, 63), None, 1e-6)
    with pytest.raises(
        ValueError, match="`fused_add_rms_norm`: `residual` has dtype float16"
    ):
        infini.ops.fused_add_rms_norm(input, residual.half(), None, 1e-6)
    with pytest.raises(
        ValueError, match="`fused_add_rms_norm`: `residual` is written but"
    ):
        infini.ops.fused_add_rms_norm(input, residual[:1].expand(4, 64), None, 1e-6)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        infini.ops.fused_add_rms_norm(input, residual, None)
    assert bool((input == 7.0).all()) and bool((residual == 7.0).all())
