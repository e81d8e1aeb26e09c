import pytest
import torch

import infini.ops
from tests.utils import Payload, randn_strided

ALL_DTYPES = (
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
)


def _fill(input, value, out, implementation_index):
    result = infini.ops.fill(
        input, value, out, implementation_index=implementation_index
    )
    assert result is None
    return out


def _torch_fill(input, value, out, implementation_index):
    return out.fill_(value)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize("value", [2.5, -3.0])
@pytest.mark.parametrize(
    "shape, strides",
    [
        pytest.param((13, 4), None, marks=pytest.mark.smoke),
        ((13, 4), (1, 13)),
        ((13, 4), (10, 2)),
        ((16, 5632), None),
        ((0, 4), None),
        ((), None),
    ],
)
def test_fill(shape, strides, value, dtype, device, implementation_index):
    out = randn_strided(shape, strides, dtype=dtype, device=device)
    # `out is input`, the usual way to call `fill`.
    return Payload(
        _fill, _torch_fill, (out, value, out, implementation_index), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("value", [0.0, 1.0, 7.9])
def test_fill_every_dtype_like_torch(dtype, value, device, implementation_index):
    out = torch.zeros(3, 5, dtype=dtype, device=device)
    _fill(out, value, out, implementation_index)
    expected = torch.zeros(3, 5, dtype=dtype, device=device).fill_(value)
    assert torch.equal(out, expected)
    if dtype.is_floating_point:
        assert torch.equal(out.signbit(), expected.signbit())


@pytest.mark.parametrize(
    "dtype, value",
    [
        (torch.int8, -128.0),
        (torch.int16, -7.9),
        (torch.uint64, 1.8e19),
        (torch.int64, -9.2e18),
        (torch.float16, 65504.0),
        (torch.float16, 1e-8),
        (torch.bfloat16, 1e38),
        (torch.float32, float("inf")),
        (torch.float32, float("nan")),
        (torch.float64, -1e300),
        (torch.bool, float("nan")),
        (torch.bool, -0.0),
    ],
    ids=str,
)
def test_fill_edge_values_like_torch(dtype, value, device, implementation_index):
    out = torch.ones(4, 3, dtype=dtype, device=device)
    _fill(torch.empty_like(out), value, out, implementation_index)
    expected = torch.ones(4, 3, dtype=dtype, device=device).fill_(value)
    assert torch.equal(out, expected) or (value != value and bool(out.isnan().all()))


@pytest.mark.parametrize(
    "value_dtype, out_dtype",
    [
        (torch.float32, torch.float32),
        (torch.float64, torch.bfloat16),
        (torch.int64, torch.float16),
        (torch.float32, torch.int32),
        (torch.bool, torch.float32),
    ],
    ids=str,
)
def test_fill_with_a_tensor_value(value_dtype, out_dtype, device, implementation_index):
    out = torch.zeros(6, 7, dtype=out_dtype, device=device).t()
    for number in (3.75, -2.0):
        value = torch.tensor(number, device=device).to(value_dtype)
        _fill(out, value, out, implementation_index)
        # The value is read on every call, not when the operator is built.
        expected = torch.zeros_like(out).fill_(value)
        assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fill_negative_zero(dtype, device, implementation_index):
    infini.ops.Fill.clear_cache()
    out = torch.ones(5, dtype=dtype, device=device)
    _fill(out, -0.0, out, implementation_index)
    assert bool((out == 0).all()) and bool(out.signbit().all())


def test_fill_negative_zero_after_positive_zero(device, implementation_index):
    out = torch.ones(5, device=device)
    _fill(out, 0.0, out, implementation_index)
    _fill(out, -0.0, out, implementation_index)
    assert bool(out.signbit().all())


def test_fill_value_tensor_inside_out_is_read_first(device, implementation_index):
    out = torch.arange(10.0, device=device)
    _fill(out, out[3], out, implementation_index)
    assert bool((out == 3.0).all())


def test_fill_leaves_gaps_alone(device, implementation_index):
    storage = torch.zeros(40, device=device)
    out = storage.view(8, 5)[:, :3]
    _fill(out, 1.5, out, implementation_index)
    assert bool((out == 1.5).all())
    assert not bool(storage.view(8, 5)[:, 3:].any())


@pytest.mark.parametrize(
    "dtype, value",
    [
        (torch.uint8, 300.0),
        (torch.uint8, -1.0),
        (torch.int32, float("nan")),
        (torch.int64, float("inf")),
        (torch.float16, 1e6),
    ],
    ids=str,
)
def test_fill_rejects_values_out_of_range_without_writing(
    dtype, value, device, implementation_index
):
    out = torch.full((4,), 7, dtype=dtype, device=device)
    with pytest.raises(ValueError, match="`fill`: `value` .* cannot be converted to"):
        _fill(out, value, out, implementation_index)
    assert bool((out == 7).all())


def test_fill_rejects_bad_arguments(device):
    out = torch.full((4, 5), 7.0, device=device)
    with pytest.raises(ValueError, match="`fill`: `out` must have shape \\(5, 4\\)"):
        infini.ops.fill(torch.empty(5, 4, device=device), 1.0, out)
    with pytest.raises(ValueError, match="`fill`: `out` has dtype float32"):
        infini.ops.fill(out.half(), 1.0, out)
    with pytest.raises(ValueError, match="`fill`: `value` must be a 0-dimensional"):
        infini.ops.fill(out, torch.ones(1, device=device), out)
    assert bool((out == 7.0).all())
    with pytest.raises(ValueError, match="`fill`: `out` is written but has a stride-0"):
        broadcast = torch.empty(1, 5, device=device).expand(4, 5)
        infini.ops.fill(broadcast, 1.0, broadcast)
    with pytest.raises(TypeError, match="`fill`: incompatible function arguments"):
        infini.ops.fill(out, out)
