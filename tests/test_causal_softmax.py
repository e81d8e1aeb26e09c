import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: `exp(x - max)` carries the rounding of `x - max` (|x - max| ulps
# relative) plus `exp`'s own, a few ulps against the float64 reference.
# 16-bit results round once from float32; a float32 difference can flip
# that rounding by one ulp, 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-6, 1e-7),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# shape, input strides, out strides, smoke
CASES = (
    ((3, 3), None, None, True),
    ((32, 512), None, None, True),
    ((3, 5), None, None, False),  # q < k: the mask starts k - q to the right
    ((5, 3), None, None, False),  # q > k: the first q - k rows are all masked
    ((2, 4, 7, 9), None, None, False),  # every (q, k) matrix, not only the first
    ((4, 13, 13), (200, 15, 1), (1, 4, 52), False),
    ((13, 33), (1, 13), None, False),
    ((3, 2, 1, 4097), (0, 4097, 4097, 1), None, False),
    ((2, 0, 5), None, None, False),
    ((2, 3, 0), None, None, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _causal_softmax(input, out, implementation_index):
    infini.ops.causal_softmax(input, out, implementation_index=implementation_index)
    return out


def _torch_causal_softmax(input, out, implementation_index=None):
    q, k = input.shape[-2:]
    masked = torch.ones(q, k, dtype=torch.bool, device=input.device).triu(k - q + 1)
    x = input.double().masked_fill(masked, float("-inf"))
    return torch.softmax(x, dim=-1).to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, dtype, rtol, atol", list(_params())
)
def test_causal_softmax(
    shape, input_strides, out_strides, dtype, rtol, atol, device, implementation_index
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _causal_softmax,
        _torch_causal_softmax,
        (input, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_causal_softmax_float64(device, implementation_index):
    input = torch.randn(2, 3, 7, 33, dtype=torch.float64, device=device)
    out = torch.empty_like(input)
    _causal_softmax(input, out, implementation_index)
    expected = _torch_causal_softmax(input, out)
    assert torch.allclose(out, expected, rtol=1e-14, atol=1e-16)


def test_causal_softmax_masks_bottom_right(device, implementation_index):
    input = torch.zeros(2, 4, device=device)
    out = torch.empty_like(input)
    _causal_softmax(input, out, implementation_index)
    # Row i keeps columns j <= i + (k - q) = i + 2.
    expected = torch.tensor(
        [[1 / 3, 1 / 3, 1 / 3, 0.0], [0.25, 0.25, 0.25, 0.25]], device=device
    )
    assert torch.allclose(out, expected, rtol=1e-7, atol=0.0)


def test_causal_softmax_large_and_special_values_like_torch(
    device, implementation_index
):
    input = torch.tensor(
        [
            [1e4, 0.0, 0.0],
            [-1e4, 1e4, 5.0],
            [float("-inf"), 3.0, float("-inf")],
            [float("-inf"), float("-inf"), float("-inf")],
            [float("nan"), 1.0, 2.0],
            [float("inf"), 1.0, 2.0],
        ],
        device=device,
    ).view(2, 3, 3)
    out = torch.empty_like(input)
    _causal_softmax(input, out, implementation_index)
    expected = _torch_causal_softmax(input, out)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7, equal_nan=True)


def test_causal_softmax_large_input_runs_in_parallel(device, implementation_index):
    input = torch.randn(2, 600, 64, device=device).transpose(1, 2)
    out = torch.empty(2, 64, 600, device=device)
    _causal_softmax(input, out, implementation_index)
    expected = _torch_causal_softmax(input, out)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_causal_softmax_in_place(dtype, device, implementation_index):
    input = torch.randn(3, 33, 40, dtype=dtype, device=device)
    expected = _torch_causal_softmax(input, input)
    _causal_softmax(input, input, implementation_index)
    assert torch.allclose(input, expected, rtol=1e-3, atol=1e-6)


def test_causal_softmax_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    storage = torch.randn(40 * 32, device=device)
    input = storage[: 32 * 32].view(32, 32)
    expected = _torch_causal_softmax(input, input)
    out = storage[8 * 32 :].view(32, 32).t()
    _causal_softmax(input, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7)


def test_causal_softmax_rejects_one_dimensional_input(device):
    input = torch.randn(8, device=device)
    with pytest.raises(
        ValueError, match="`causal_softmax`: `input` must have at least 2"
    ):
        infini.ops.causal_softmax(input, torch.empty_like(input))


def test_causal_softmax_rejects_wrong_output_shape_without_writing(device):
    input = torch.randn(4, 5, device=device)
    out = torch.full((5, 4), 7.0, device=device)
    with pytest.raises(
        ValueError, match="`causal_softmax`: `out` must have shape \\(4, 5\\)"
    ):
        infini.ops.causal_softmax(input, out)
    assert bool((out == 7.0).all())


def test_causal_softmax_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(4, 5, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="`causal_softmax`: `out` has dtype float16"):
        infini.ops.causal_softmax(input, out)


def test_causal_softmax_rejects_unsupported_dtype(device):
    input = torch.ones(4, 5, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`causal_softmax`: `input` has dtype int32"):
        infini.ops.causal_softmax(input, torch.empty_like(input))


def test_causal_softmax_rejects_broadcast_output(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(1, 5, device=device).expand(4, 5)
    with pytest.raises(
        ValueError, match="`causal_softmax`: `out` is written but has a stride-0"
    ):
        infini.ops.causal_softmax(input, out)


def test_causal_softmax_rejects_non_tensor_arguments(device):
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match="`causal_softmax`: `out` must be a tensor"):
        infini.ops.causal_softmax(input, None)
    with pytest.raises(
        TypeError, match="`causal_softmax`: incompatible function arguments"
    ):
        infini.ops.causal_softmax(input)
