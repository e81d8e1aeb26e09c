import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

SHAPES_AND_STRIDES = [
    pytest.param((13, 4), None, None, None, marks=pytest.mark.smoke),
    pytest.param((13, 4), (10, 1), (10, 1), (10, 1), marks=pytest.mark.smoke),
    ((13, 4), (0, 1), None, None),
    ((13, 4), None, (4, 0), None),
    ((13, 4, 4), None, None, None),
    ((1,), None, None, None),
    ((4097,), None, None, None),
    # Large enough for the parallel kernel.
    ((16, 5632), None, None, None),
    ((13, 4), (1, 13), (1, 13), None),
    ((33, 7), (7, 1), (0, 1), (1, 33)),
    ((4, 4, 5632), (45056, 5632, 1), (0, 5632, 1), (22528, 1, 4)),
    ((0, 5), None, None, None),
    ((), None, None, None),
]


def _mul(input, other, out, implementation_index):
    infini.ops.mul(input, other, out, implementation_index=implementation_index)
    return out


def _torch_mul(input, other, out, implementation_index):
    return torch.mul(input.double(), other.double()).to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, other_strides, out_strides", SHAPES_AND_STRIDES
)
def test_mul(
    shape,
    input_strides,
    other_strides,
    out_strides,
    dtype,
    device,
    implementation_index,
    rtol,
    atol,
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    other = randn_strided(shape, other_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    # A product of two 16-bit or 32-bit floats is exact in float64 (and in
    # float32 for 16-bit floats), so one rounding gives exactly the reference.
    return Payload(
        _mul,
        _torch_mul,
        (input, other, out, implementation_index),
        rtol=0,
        atol=0,
    )


OTHER_DTYPES = [
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float64,
    torch.bool,
]


@pytest.mark.parametrize("dtype", OTHER_DTYPES, ids=str)
@pytest.mark.parametrize("input_strides", [None, (1, 7)], ids=["contiguous", "t"])
def test_mul_other_dtypes_match_torch(
    dtype, input_strides, device, implementation_index
):
    shape = (7, 9)
    if dtype == torch.bool:
        input = randint_strided(0, 2, shape, input_strides, dtype=dtype, device=device)
        other = torch.rand(shape, device=device) > 0.5
    elif dtype.is_floating_point:
        input = randn_strided(shape, input_strides, dtype=dtype, device=device)
        other = torch.randn(shape, dtype=dtype, device=device)
    else:
        # Full-range values, so that products overflow and must wrap as in torch.
        info = torch.iinfo(dtype)
        low, high = max(info.min, -(2**62)), min(info.max, 2**62)
        input = randint_strided(
            low, high, shape, input_strides, dtype=dtype, device=device
        )
        other = randint_strided(low, high, shape, dtype=dtype, device=device)
    out = torch.empty(shape, dtype=dtype, device=device)
    infini.ops.mul(input, other, out, implementation_index=implementation_index)
    assert torch.equal(out, torch.mul(input, other))


def test_mul_broadcasts_inputs_of_lower_rank(device, implementation_index):
    input = torch.randn(5, 1, 3, device=device)
    other = torch.randn(4, 1, device=device)
    out = torch.empty(5, 4, 3, device=device)
    infini.ops.mul(input, other, out, implementation_index=implementation_index)
    assert torch.equal(out, input * other)


def test_mul_special_values_match_torch(device, implementation_index):
    values = [0.0, -0.0, 1.0, -2.5, float("inf"), -float("inf"), float("nan")]
    input = torch.tensor(values, device=device).repeat_interleave(len(values))
    other = torch.tensor(values, device=device).repeat(len(values))
    out = torch.empty_like(input)
    infini.ops.mul(input, other, out, implementation_index=implementation_index)
    expected = input * other
    assert torch.equal(out.isnan(), expected.isnan())
    finite = ~expected.isnan()
    assert torch.equal(out[finite], expected[finite])
    assert torch.equal(out[finite].signbit(), expected[finite].signbit())


@pytest.mark.parametrize("target", ["input", "other", "both"])
def test_mul_in_place(target, device, implementation_index):
    input = torch.randn(33, 17, device=device)
    other = input if target == "both" else torch.randn(33, 17, device=device)
    expected = input * other
    out = other if target == "other" else input
    infini.ops.mul(input, other, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("layout", ["transposed", "shifted"])
def test_mul_partially_overlapping_output_reads_inputs_first(
    layout, device, implementation_index
):
    storage = torch.randn(64 * 64 + 1, device=device)
    input = storage[: 64 * 64].view(64, 64)
    other = torch.randn(64, 64, device=device)
    expected = (input * other).clone()
    if layout == "transposed":
        out = storage[: 64 * 64].view(64, 64).t()
    else:
        out = storage[1:].view(64, 64)
    infini.ops.mul(input, other, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


def test_mul_rejects_inputs_that_do_not_broadcast(device):
    input = torch.randn(4, 5, device=device)
    other = torch.randn(4, 6, device=device)
    out = torch.empty(4, 5, device=device)
    with pytest.raises(ValueError, match="`mul`: the inputs do not broadcast"):
        infini.ops.mul(input, other, out)


def test_mul_rejects_wrong_output_shape_without_writing(device):
    input = torch.randn(4, 5, device=device)
    for shape in [(4, 4), (5,), (1, 4, 5)]:
        out = torch.full(shape, 7.0, device=device)
        with pytest.raises(ValueError, match="`mul`: `out` must have the broadcast"):
            infini.ops.mul(input, input, out)
        assert bool((out == 7.0).all())


def test_mul_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 5, device=device)
    other = torch.randn(4, 5, device=device, dtype=torch.float64)
    with pytest.raises(ValueError, match="`mul`: `other` has dtype float64"):
        infini.ops.mul(input, other, torch.empty_like(input))
    with pytest.raises(ValueError, match="`mul`: `out` has dtype int32"):
        infini.ops.mul(input, input, torch.empty(4, 5, dtype=torch.int32))


def test_mul_rejects_broadcast_output(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(1, 5, device=device).expand(4, 5)
    with pytest.raises(ValueError, match="`mul`: `out` is written but has a stride-0"):
        infini.ops.mul(input, input, out)


def test_mul_rejects_unsupported_dtype(device):
    input = torch.randn(4, 5, device=device, dtype=torch.complex64)
    with pytest.raises(ValueError, match="`mul`: `input` has unsupported dtype"):
        infini.ops.mul(input, input, torch.empty_like(input))


def test_mul_rejects_non_tensor_arguments(device):
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match="`mul`: `other` must be a tensor"):
        infini.ops.mul(input, 2.0, torch.empty_like(input))
    with pytest.raises(TypeError, match="`mul`: incompatible function arguments"):
        infini.ops.mul(input, input)
