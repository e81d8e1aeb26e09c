import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SIGNED_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64]
UNSIGNED_DTYPES = [torch.uint8, torch.uint16, torch.uint32, torch.uint64]
BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _relu(input, out, implementation_index):
    infini.ops.relu(input, out, implementation_index=implementation_index)
    return out


def _torch_relu(input, out, implementation_index):
    return torch.relu(input)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides",
    [
        pytest.param((1, 3), None, None, marks=pytest.mark.smoke),
        ((13, 4), None, None),
        ((13, 4), (10, 1), (10, 1)),
        ((13, 4), (1, 13), None),
        ((13, 4), None, (1, 13)),
        ((13, 4), (0, 1), None),
        ((13, 4, 4), (1, 52, 13), None),
        ((1,), None, None),
        ((4097,), None, None),
        ((33,), (3,), (2,)),
        # Large enough for the parallel kernel.
        ((16, 5632), None, None),
        ((4, 4, 5632), (45056, 5632, 1), (22528, 1, 4)),
        ((0, 5), None, None),
        ((), None, None),
    ],
)
def test_relu(
    shape, input_strides, out_strides, dtype, device, implementation_index, rtol, atol
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    # `relu` only selects values: the result is exact.
    return Payload(
        _relu, _torch_relu, (input, out, implementation_index), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", SIGNED_DTYPES + UNSIGNED_DTYPES, ids=str)
@pytest.mark.parametrize("input_strides", [None, (1, 7)], ids=["contiguous", "t"])
def test_relu_integer_dtypes(dtype, input_strides, device, implementation_index):
    info = torch.iinfo(dtype)
    low, high = max(info.min, -(2**62)), min(info.max, 2**62)
    input = randint_strided(
        low, high, (7, 9), input_strides, dtype=dtype, device=device
    )
    input[0, :2] = torch.tensor([info.min, info.max], dtype=dtype)
    out = torch.empty(7, 9, dtype=dtype, device=device)
    if implementation_index == 8 and dtype in (
        torch.uint16,
        torch.uint32,
        torch.uint64,
    ):
        # Slot 8 calls ATen as is, which has no `relu` for these; it says so.
        with pytest.raises(ValueError, match=r"`relu`: the ATen implementation.*uint"):
            infini.ops.relu(input, out, implementation_index=8)
        return
    infini.ops.relu(input, out, implementation_index=implementation_index)
    if dtype.is_signed:
        expected = torch.relu(input)
    else:
        # Nothing unsigned is negative (torch has no CPU `relu` for uint16-64).
        expected = input
    assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_relu_special_values_match_torch_bit_for_bit(
    dtype, device, implementation_index
):
    bits = BITS[dtype.itemsize]
    nan = torch.tensor([float("nan")], dtype=dtype)
    tiny = torch.finfo(dtype).tiny
    values = torch.tensor(
        [-0.0, 0.0, -1.0, 1.0, float("inf"), -float("inf"), tiny / 4, -tiny / 4],
        dtype=dtype,
    )
    # NaNs with either sign bit and a payload survive untouched.
    negative_nan = nan.view(bits) | torch.tensor([-(2 ** (8 * dtype.itemsize - 1))])
    payload_nan = nan.view(bits) | 1
    input = torch.cat(
        [values, nan, negative_nan.to(bits).view(dtype), payload_nan.view(dtype)]
    ).to(device)
    out = torch.empty_like(input)
    infini.ops.relu(input, out, implementation_index=implementation_index)
    assert torch.equal(out.view(bits), torch.relu(input).view(bits))
    assert out[0].signbit() and not out[5].signbit()


@pytest.mark.smoke
@pytest.mark.parametrize("inplace", [False, True])
def test_relu_in_place(inplace, device, implementation_index):
    input = torch.randn(1, 3, device=device)
    expected = torch.relu(input)
    out = input if inplace else torch.empty_like(input)
    infini.ops.relu(input, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32], ids=str)
@pytest.mark.parametrize(
    "size", [pytest.param(33, marks=pytest.mark.smoke), 4, 300], ids=str
)
def test_relu_partially_overlapping_output_reads_input_first(
    size, dtype, device, implementation_index
):
    # `out = input.t()`: every element but the diagonal is another's input.
    input = randn_strided((size, size), dtype=torch.float32, device=device)
    input = input.to(dtype) if dtype.is_floating_point else (input * 100).to(dtype)
    expected = torch.relu(input).clone()
    infini.ops.relu(input, input.t(), implementation_index=implementation_index)
    assert torch.equal(input.t(), expected)


@pytest.mark.parametrize("shift", [1, -1, 5])
def test_relu_shifted_overlap_reads_input_first(shift, device, implementation_index):
    storage = torch.randn(100, device=device)
    start = max(-shift, 0)
    input = storage[start : start + 90]
    expected = torch.relu(input).clone()
    out = storage[start + shift : start + shift + 90]
    infini.ops.relu(input, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


def test_relu_rejects_bool(device):
    input = torch.ones(4, dtype=torch.bool, device=device)
    with pytest.raises(ValueError, match="`relu`: `input` has dtype bool"):
        infini.ops.relu(input, torch.empty_like(input))


def test_relu_rejects_unsupported_dtype(device):
    input = torch.ones(4, dtype=torch.complex64, device=device)
    with pytest.raises(ValueError, match="`relu`: `input` has unsupported dtype"):
        infini.ops.relu(input, torch.empty_like(input))


def test_relu_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(4, 5, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="`relu`: `out` has dtype float16"):
        infini.ops.relu(input, out)


@pytest.mark.parametrize("shape", [(4, 4), (5, 4), (20,), (1, 4, 5)], ids=str)
def test_relu_rejects_wrong_output_shape_without_writing(shape, device):
    input = torch.randn(4, 5, device=device)
    out = torch.full(shape, 7.0, device=device)
    with pytest.raises(ValueError, match="`relu`: `out` must have shape \\(4, 5\\)"):
        infini.ops.relu(input, out)
    assert bool((out == 7.0).all())


def test_relu_rejects_broadcast_output(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(1, 5, device=device).expand(4, 5)
    with pytest.raises(ValueError, match="`relu`: `out` is written but has a stride-0"):
        infini.ops.relu(input, out)


def test_relu_rejects_non_tensor_arguments(device):
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match="`relu`: `input` must be a tensor"):
        infini.ops.relu([1.0, -1.0], input)
    with pytest.raises(TypeError, match="`relu`: incompatible function arguments"):
        infini.ops.relu(input)
