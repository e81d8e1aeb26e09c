import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from tests.utils import Payload, empty_strided, randn_strided

# float32: the summation order of a k-term dot product (BLAS blocking) moves
# results by about sqrt(k) * eps * |a| |b|, an absolute error where the sum
# cancels. 16-bit results round once from float32; a float32 difference can
# flip that rounding by one ulp, 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# Wide enough for several column blocks of every kernel: under Triton's
# interpreter, which loads about ten million elements a second, narrower.
WIDE = 1025 if TRITON_INTERPRETER else 4097

# input shape, other shape, out shape, input strides, other strides, out strides, smoke
CASES = (
    ((4, 64), (64, 32), (4, 32), None, None, None, True),
    ((2, 4, 64), (2, 64, 32), (2, 4, 32), None, None, None, True),
    ((64,), (64,), (), None, None, None, False),
    ((33,), (33, 13), (13,), (2,), None, None, False),
    ((13, 33), (33,), (13,), (1, 13), (3,), None, False),
    ((13, 33), (33, 17), (13, 17), (1, 13), (1, 33), (1, 13), False),
    ((3, 1, 5, 33), (2, 33, 7), (3, 2, 5, 7), None, None, None, False),
    ((33,), (3, 33, 7), (3, 7), None, (0, 7, 1), None, False),
    ((3, 5, 33), (33, WIDE), (3, 5, WIDE), (0, 33, 1), None, None, False),
    ((2, 0, 8), (2, 8, 3), (2, 0, 3), None, None, None, False),
    ((2, 3, 20, 24), (3, 24, 18), (2, 3, 20, 18), None, (432, 1, 24), None, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _matmul(input, other, out, implementation_index):
    infini.ops.matmul(input, other, out, implementation_index=implementation_index)
    return out


def _torch_matmul(input, other, out, implementation_index):
    return torch.matmul(input.double(), other.double()).to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "input_shape, other_shape, out_shape, input_strides, other_strides, "
    "out_strides, dtype, rtol, atol",
    list(_params()),
)
def test_matmul(
    input_shape,
    other_shape,
    out_shape,
    input_strides,
    other_strides,
    out_strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(input_shape, input_strides, dtype=dtype, device=device)
    other = randn_strided(other_shape, other_strides, dtype=dtype, device=device)
    out = empty_strided(out_shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _matmul,
        _torch_matmul,
        (input, other, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_matmul_float64(device, implementation_index):
    input = torch.randn(2, 1, 5, 33, dtype=torch.float64, device=device)
    other = torch.randn(3, 33, 7, dtype=torch.float64, device=device)
    out = torch.empty(2, 3, 5, 7, dtype=torch.float64, device=device)
    _matmul(input, other, out, implementation_index)
    assert torch.allclose(out, input @ other, rtol=1e-12, atol=1e-12)


def test_matmul_empty_contraction_is_zero(device, implementation_index):
    input = torch.randn(3, 0, device=device)
    other = torch.randn(0, 4, device=device)
    out = torch.full((3, 4), float("nan"), device=device)
    _matmul(input, other, out, implementation_index)
    assert torch.equal(out, torch.zeros(3, 4, device=device))


@pytest.mark.parametrize("target", ["input", "other"])
def test_matmul_output_aliases_input(target, device, implementation_index):
    input = torch.randn(2, 16, 16, device=device)
    other = torch.randn(2, 16, 16, device=device)
    expected = input @ other
    out = input if target == "input" else other
    _matmul(input, other, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_matmul_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    storage = torch.randn(20 * 16, device=device)
    input = storage[: 16 * 16].view(16, 16)
    other = torch.randn(16, 16, device=device)
    expected = input @ other
    out = storage[4 * 16 :].view(16, 16).t()
    _matmul(input, other, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "input_shape, other_shape, out_shape, match",
    [
        ((4, 64), (63, 32), (4, 32), "64 != 63"),
        ((64,), (63,), (), "64 != 63"),
        ((2, 4, 8), (3, 8, 5), (3, 4, 5), "do not broadcast"),
        ((4, 8), (8, 5), (4, 6), "`out` must have shape \\(4, 5\\)"),
        ((8,), (8, 5), (1, 5), "`out` must have shape \\(5,\\)"),
    ],
)
def test_matmul_rejects_bad_shapes_without_writing(
    input_shape, other_shape, out_shape, match, device
):
    input = torch.randn(input_shape, device=device)
    other = torch.randn(other_shape, device=device)
    out = torch.full(out_shape, 7.0, device=device)
    with pytest.raises(ValueError, match=f"`matmul`: .*{match}"):
        infini.ops.matmul(input, other, out)
    assert bool((out == 7.0).all())


def test_matmul_rejects_scalar_operands(device):
    scalar = torch.tensor(2.0, device=device)
    with pytest.raises(ValueError, match="`matmul`: `other` must have at least 1"):
        infini.ops.matmul(torch.randn(3, device=device), scalar, scalar.clone())


def test_matmul_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 8, device=device)
    other = torch.randn(8, 3, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="`matmul`: `other` has dtype bfloat16"):
        infini.ops.matmul(input, other, torch.empty(4, 3, device=device))


def test_matmul_rejects_unsupported_dtype(device):
    input = torch.ones(4, 8, dtype=torch.int32, device=device)
    other = torch.ones(8, 3, dtype=torch.int32, device=device)
    out = torch.empty(4, 3, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`matmul`: `input` has dtype int32"):
        infini.ops.matmul(input, other, out)


def test_matmul_rejects_broadcast_output(device):
    input = torch.randn(4, 8, device=device)
    other = torch.randn(8, 3, device=device)
    out = torch.empty(4, 1, device=device).expand(4, 3)
    with pytest.raises(
        ValueError, match="`matmul`: `out` is written but has a stride-0"
    ):
        infini.ops.matmul(input, other, out)


def test_matmul_rejects_non_tensor_arguments(device):
    input = torch.randn(4, 8, device=device)
    with pytest.raises(ValueError, match="`matmul`: `other` must be a tensor"):
        infini.ops.matmul(input, 2.0, torch.empty(4, 8, device=device))
    with pytest.raises(TypeError, match="`matmul`: incompatible function arguments"):
        infini.ops.matmul(input, input)
