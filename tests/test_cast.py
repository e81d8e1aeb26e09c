import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
i8, i16, i32, i64 = torch.int8, torch.int16, torch.int32, torch.int64
u8, u16, u32, u64 = torch.uint8, torch.uint16, torch.uint32, torch.uint64
BOOL = torch.bool
ALL_DTYPES = [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, BOOL]
FLOAT_DTYPES = [f16, bf16, f32, f64]
BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}

# Every dtype appears as a source and as a destination; each pair compiles
# one kernel, so the set is representative rather than all 169 pairs.
PAIRS = [
    # float <-> float
    (f16, f32),
    (f32, f16),
    (f32, bf16),
    (bf16, f32),
    (f64, f16),
    (f64, bf16),
    (f16, bf16),
    (bf16, f16),
    (f32, f64),
    (f64, f32),
    (bf16, f64),
    # float -> integer (truncation toward zero)
    (f32, i32),
    (f64, i64),
    (bf16, i8),
    (f16, i16),
    (f32, u8),
    (f64, u16),
    (f16, u32),
    (f64, u64),
    # integer -> float
    (i64, f16),
    (i32, bf16),
    (u8, f32),
    (u64, f64),
    (i8, f64),
    (u16, f32),
    (u32, f16),
    (i16, bf16),
    (u64, f32),
    # integer -> integer (two's complement wrap-around)
    (i8, u64),
    (u64, i64),
    (i32, i16),
    (i64, u8),
    (u16, i32),
    (u32, i64),
    (i16, u16),
    (u8, i8),
    (i64, u32),
    # bool
    (BOOL, f32),
    (BOOL, i64),
    (f32, BOOL),
    (bf16, BOOL),
    (i32, BOOL),
    (u8, BOOL),
    # same dtype: a copy
    (f16, f16),
    (i64, i64),
    (BOOL, BOOL),
]


def _name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _pair_ids(pairs) -> list[str]:
    return [f"{_name(source)}-to-{_name(destination)}" for source, destination in pairs]


def _source(shape, strides, source, destination, device):
    """Values of `source` whose conversion to `destination` torch defines:
    in range of an integer destination (negative ones only where the
    destination is signed, or `uint8`, which torch converts through int64)."""
    if source == BOOL:
        return randint_strided(0, 2, shape, strides, dtype=BOOL, device=device)
    if source.is_floating_point:
        # Shaped on the whole storage span (gaps included), then laid out
        # with the requested strides.
        values = randn_strided(shape, strides, dtype=f64, device=device)
        flat = torch.as_strided(values, (values.untyped_storage().nbytes() // 8,), (1,))
        if destination == BOOL:
            flat = flat.where(flat.abs() > 1.0, torch.zeros_like(flat))
        elif not destination.is_floating_point:
            info = torch.iinfo(destination)
            high = min(info.max, 2**24, torch.finfo(source).max)
            low = -high if destination.is_signed or destination == u8 else 0
            flat = (flat * (high / 4)).clamp(low, high)
        else:
            flat = flat * 100
        return torch.as_strided(flat.to(source), shape, values.stride())
    info = torch.iinfo(source)
    low, high = max(info.min, -(2**62)), min(info.max, 2**62)
    return randint_strided(low, high, shape, strides, dtype=source, device=device)


def _cast(input, out, implementation_index):
    infini.ops.cast(input, out, implementation_index=implementation_index)
    return out


def _torch_cast(input, out, implementation_index):
    return input.to(out.dtype)


SHAPES_AND_STRIDES = [
    ((13, 4), None, None),
    ((13, 4), (10, 1), (10, 1)),
    ((13, 4), (1, 13), None),
    ((13, 4), None, (1, 13)),
    ((13, 4), (0, 1), None),
    ((1,), None, None),
    ((4097,), (2,), None),
    # Large enough for the parallel kernel.
    ((16, 5632), None, None),
    ((4, 4, 5632), (45056, 5632, 1), (22528, 1, 4)),
    ((0, 5), None, None),
    ((), None, None),
]


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize("shape, input_strides, out_strides", SHAPES_AND_STRIDES)
@pytest.mark.parametrize(
    "source, destination",
    [(f16, f32), (f32, f16), (f32, i32), (i8, u64)],
    ids=_pair_ids([(f16, f32), (f32, f16), (f32, i32), (i8, u64)]),
)
def test_cast_layouts(
    shape, input_strides, out_strides, source, destination, device, implementation_index
):
    input = _source(shape, input_strides, source, destination, device)
    out = empty_strided(shape, out_strides, dtype=destination, device=device)
    # Conversions are exact or correctly rounded, as torch's: no tolerance.
    return Payload(
        _cast, _torch_cast, (input, out, implementation_index), rtol=0, atol=0
    )


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, source, destination",
    [
        pytest.param((13, 4), None, None, f16, f32, marks=pytest.mark.smoke),
        pytest.param((13, 4), (10, 1), (10, 1), f32, f16, marks=pytest.mark.smoke),
    ],
)
def test_cast(
    shape, input_strides, out_strides, source, destination, device, implementation_index
):
    input = _source(shape, input_strides, source, destination, device)
    out = empty_strided(shape, out_strides, dtype=destination, device=device)
    return Payload(
        _cast, _torch_cast, (input, out, implementation_index), rtol=0, atol=0
    )


@pytest.mark.parametrize("source, destination", PAIRS, ids=_pair_ids(PAIRS))
def test_cast_pairs_match_torch(source, destination, device, implementation_index):
    # Transposed input, strided output: both walk memory out of order.
    input = _source((9, 33), None, source, destination, device).t()
    out = empty_strided((33, 9), (10, 1), dtype=destination, device=device)
    infini.ops.cast(input, out, implementation_index=implementation_index)
    expected = input.to(destination)
    assert torch.equal(out, expected)


def test_cast_pairs_cover_every_dtype():
    assert {source for source, _ in PAIRS} == set(ALL_DTYPES)
    assert {destination for _, destination in PAIRS} == set(ALL_DTYPES)


FLOAT_PAIRS = [(s, d) for s in FLOAT_DTYPES for d in FLOAT_DTYPES if s != d]


@pytest.mark.parametrize(
    "source, destination",
    FLOAT_PAIRS,
    ids=_pair_ids(FLOAT_PAIRS),
)
def test_cast_float_special_values(source, destination, device, implementation_index):
    values = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.5, -2.25]
    # Values that overflow or underflow the narrower types.
    values += [1e5, -1e5, 1e-8, -1e-8, 3.0e38, 1e-40]
    input = torch.tensor(values, dtype=f64).to(source).to(device)
    out = torch.empty(len(values), dtype=destination, device=device)
    infini.ops.cast(input, out, implementation_index=implementation_index)
    expected = input.to(destination)
    assert torch.equal(out.isnan(), expected.isnan())
    # Bit for bit (zeros and infinities keep their sign); NaN payloads are
    # not compared, since torch's vectorised and scalar paths differ there.
    numbers = ~expected.isnan()
    bits = BITS[destination.itemsize]
    assert torch.equal(out[numbers].view(bits), expected[numbers].view(bits))


@pytest.mark.parametrize("source", FLOAT_DTYPES, ids=_name)
def test_cast_float_to_bool_treats_nan_as_true(source, device, implementation_index):
    input = torch.tensor(
        [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-30, -0.5]
    ).to(source)
    out = torch.empty(7, dtype=BOOL, device=device)
    infini.ops.cast(input.to(device), out, implementation_index=implementation_index)
    assert out.tolist()[:5] == [False, False, True, True, True]
    assert torch.equal(out, input.to(BOOL))


@pytest.mark.parametrize(
    "destination", [i8, i16, i32, i64, u8, u16, u32, u64], ids=_name
)
@pytest.mark.parametrize("source", [f32, f64, f16], ids=_name)
def test_cast_float_to_integer_truncates_toward_zero(
    source, destination, device, implementation_index
):
    values = [0.0, 0.5, 0.99, 1.0, 2.7, 100.5, 126.99]
    if destination.is_signed or destination == u8:
        # torch converts to `uint8` through int64, so negatives wrap.
        values += [-0.5, -0.99, -1.0, -2.7, -100.5, -127.9]
    input = torch.tensor(values, dtype=source, device=device)
    out = torch.empty(len(values), dtype=destination, device=device)
    infini.ops.cast(input, out, implementation_index=implementation_index)
    assert torch.equal(out, input.to(destination))
    expected = [int(v) for v in input.double().tolist()]
    if destination == u8:
        expected = [v % 256 for v in expected]
    assert out.tolist() == expected


@pytest.mark.parametrize("destination", [f16, bf16], ids=_name)
def test_cast_rounds_to_nearest_even(destination, device, implementation_index):
    mantissa = 10 if destination == f16 else 7
    step = 2.0**-mantissa
    # Halfway cases go to the even neighbour; just above halfway rounds up.
    values = [1 + step / 2, 1 + 3 * step / 2, 1 + step / 2 + 2**-20, -(1 + step / 2)]
    input = torch.tensor(values, dtype=f32, device=device)
    out = torch.empty(4, dtype=destination, device=device)
    infini.ops.cast(input, out, implementation_index=implementation_index)
    assert out.tolist() == [1.0, 1 + 2 * step, 1 + step, -1.0]
    assert torch.equal(out, input.to(destination))


@pytest.mark.parametrize(
    "source, destination",
    [(f64, f16), (f64, bf16), (i64, bf16)],
    ids=["float64-to-float16", "float64-to-bfloat16", "int64-to-bfloat16"],
)
def test_cast_to_16_bit_floats_rounds_through_float32_like_torch(
    source, destination, device, implementation_index
):
    # torch builds `Half`/`BFloat16` from a float, so a float64 or int64
    # value just above a halfway point first rounds to the halfway point in
    # float32 and then to even: both roundings must be reproduced. (No int64
    # rounds twice on the way to float16: those beyond float32's exact range
    # overflow float16.)
    mantissa = 10 if destination == f16 else 7
    if source == f64:
        values = [1 + 2.0 ** -(mantissa + 1) + 2.0**-40]
    else:
        values = [(2 ** (mantissa + 1) + 1) * 2**30 + 1]
    input = torch.tensor(values, dtype=source, device=device)
    out = torch.empty(1, dtype=destination, device=device)
    infini.ops.cast(input, out, implementation_index=implementation_index)
    assert torch.equal(out, input.to(destination))
    assert torch.equal(out, input.to(f32).to(destination))


@pytest.mark.parametrize(
    "source, destination",
    [(i64, i8), (i8, u64), (u64, i64)],
    ids=["int64-to-int8", "int8-to-uint64", "uint64-to-int64"],
)
def test_cast_integers_wrap_around(source, destination, device, implementation_index):
    info = torch.iinfo(source)
    values = [info.min, info.max, -1 if source.is_signed else 2**8 + 3, 0, 100]
    input = torch.tensor(values, dtype=source, device=device)
    out = torch.empty(len(values), dtype=destination, device=device)
    infini.ops.cast(input, out, implementation_index=implementation_index)
    assert torch.equal(out, input.to(destination))


def test_cast_in_place_same_dtype(device, implementation_index):
    input = torch.randn(13, 4, device=device)
    expected = input.clone()
    infini.ops.cast(input, input, implementation_index=implementation_index)
    assert torch.equal(input, expected)


@pytest.mark.parametrize(
    "source, destination",
    [(f32, f32), (f32, i32), (i32, f32)],
    ids=_pair_ids([(f32, f32), (f32, i32), (i32, f32)]),
)
def test_cast_overlapping_output_reads_input_first(
    source, destination, device, implementation_index
):
    # The output is the input's memory reinterpreted (another dtype) and
    # transposed: without staging, writes would clobber unread inputs.
    storage = (torch.randn(33 * 33, device=device) * 100).to(source)
    input = storage.view(33, 33)
    expected = input.to(destination).clone()
    out = storage.view(destination).view(33, 33).t()
    infini.ops.cast(input, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


def test_cast_into_wider_overlapping_output(device, implementation_index):
    storage = torch.randint(-100, 100, (64,), dtype=torch.int16, device=device)
    input = storage[:16]
    expected = input.to(torch.int64)
    # Four int16 elements per int64: `out` covers `input` and beyond.
    out = storage.view(torch.int64)[:16]
    infini.ops.cast(input, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("shape", [(4, 4), (5, 4), (20,), (1, 4, 5)], ids=str)
def test_cast_rejects_wrong_output_shape_without_writing(shape, device):
    input = torch.randn(4, 5, device=device)
    out = torch.full(shape, 7, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`cast`: `out` must have shape \\(4, 5\\)"):
        infini.ops.cast(input, out)
    assert bool((out == 7).all())


def test_cast_rejects_broadcast_output(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(1, 5, dtype=f16, device=device).expand(4, 5)
    with pytest.raises(ValueError, match="`cast`: `out` is written but has a stride-0"):
        infini.ops.cast(input, out)


def test_cast_rejects_unsupported_dtype(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(4, 5, dtype=torch.complex64, device=device)
    with pytest.raises(ValueError, match="`cast`: `out` has unsupported dtype"):
        infini.ops.cast(input, out)


def test_cast_rejects_non_tensor_arguments(device):
    out = torch.empty(4, device=device)
    with pytest.raises(ValueError, match="`cast`: `input` must be a tensor"):
        infini.ops.cast(3.0, out)
    with pytest.raises(TypeError, match="`cast`: incompatible function arguments"):
        infini.ops.cast(out)
