import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from tests._convolution import (
    DTYPE_IDS,
    DTYPES,
    assert_matches,
    empty_out,
    random_tensor,
)

# input shape, weight shape, stride, padding, dilation, transposed,
# output_padding, groups, bias.
CASES = (
    ((2, 4, 9), (6, 4, 3), [1], [1], [1], False, [0], 1, True),
    ((1, 4, 7, 8), (6, 2, 3, 3), [2, 1], [1, 0], [1, 2], False, [0], 2, True),
    ((1, 3, 4, 5, 6), (4, 3, 2, 2, 3), [1], [0], [1], False, [0], 1, False),
    ((1, 6, 7, 7), (6, 1, 3, 3), [1], [1], [1], False, [0], 6, True),
    # ATen ignores `output_padding` of a plain convolution.
    ((1, 4, 9), (6, 4, 3), [2], [1], [1], False, [1], 1, True),
    # Transposed: `weight` is (C_in, C_out / groups, *kernel).
    ((2, 4, 9), (4, 3, 3), [2], [1], [1], True, [1], 1, True),
    ((1, 4, 5, 6), (4, 3, 3, 3), [2], [1], [1], True, [1], 2, True),
    ((1, 4, 5, 6), (4, 2, 2, 3), [1, 2], [0, 1], [2, 1], True, [1, 0], 1, False),
    ((1, 6, 4, 4), (6, 1, 4, 4), [2], [1], [1], True, [0], 6, True),
    ((2, 3, 3, 4, 4), (3, 2, 3, 3, 3), [2], [1], [1], True, [1], 1, True),
    ((1, 4, 6), (4, 5, 1), [1], [0], [1], True, [0], 1, False),
    ((0, 4, 6), (4, 5, 3), [2], [0], [1], True, [0], 1, True),
    # 16 or more input channels per group (channel blocks on GPUs).
    ((1, 32, 4, 5), (32, 3, 3, 3), [2], [1], [1], True, [1], 2, True),
    ((1, 16, 5), (16, 4, 3), [3], [1], [2], True, [2], 1, False),
    ((1, 16, 5, 4), (4, 16, 3, 1), [2, 1], [1, 0], [1], False, [0], 1, True),
)


def _call(
    input,
    weight,
    bias,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    out,
    index,
):
    infini.ops.convolution(
        input,
        weight,
        bias,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        out,
        implementation_index=index,
    )


def _reference(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    return torch.ops.aten.convolution(
        input.cpu().double(),
        weight.cpu().double(),
        None if bias is None else bias.cpu().double(),
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "input_shape, weight_shape, stride, padding, dilation, transposed, "
    "output_padding, groups, with_bias",
    CASES,
)
def test_convolution(
    input_shape,
    weight_shape,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    with_bias,
    dtype,
    rtol,
    device,
    implementation_index,
):
    input = random_tensor(input_shape, dtype, device)
    weight = random_tensor(weight_shape, dtype, device)
    channels = weight_shape[1] * groups if transposed else weight_shape[0]
    bias = random_tensor((channels,), dtype, device) if with_bias else None
    arguments = (stride, padding, dilation, transposed, output_padding, groups)
    expected = _reference(input, weight, bias, *arguments)
    out = empty_out(expected.shape, dtype, device)
    _call(input, weight, bias, *arguments, out, implementation_index)
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("groups", (1, 2))
def test_convolution_transposed_strided(
    groups, dtype, rtol, device, implementation_index
):
    input = random_tensor((2, 4, 5, 6), dtype, device, "channels_last")
    weight = random_tensor((4, 3, 3, 2), dtype, device, "strided")
    bias = random_tensor((3 * groups,), dtype, device, "strided")
    arguments = ([2], [1], [1], True, [1], groups)
    expected = _reference(input, weight, bias, *arguments)
    out = empty_out(expected.shape, dtype, device, "strided")
    _call(input, weight, bias, *arguments, out, implementation_index)
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
def test_convolution_transposed_tiles(
    dtype, rtol, device, implementation_index, monkeypatch
):
    if device != "cpu" or implementation_index != 0:
        pytest.skip("tiles are a detail of the CPU implementation (slot 0)")
    from infini.ops.native.cpu import convolution

    # Tiles of three items and of two.
    monkeypatch.setattr(convolution, "TILE_BYTES", 1024)
    infini.ops.Convolution.clear_cache()
    input = random_tensor((5, 4, 6), dtype, device)
    weight = random_tensor((4, 3, 3), dtype, device)
    bias = random_tensor((3,), dtype, device)
    arguments = ([2], [1], [1], True, [1], 1)
    expected = _reference(input, weight, bias, *arguments)
    out = empty_out(expected.shape, dtype, device)
    try:
        _call(input, weight, bias, *arguments, out, 0)
    finally:
        infini.ops.Convolution.clear_cache()
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("dtype, rtol", DTYPES[::2], ids=DTYPE_IDS[::2])
@pytest.mark.parametrize(
    "input_shape, weight_shape, groups",
    # Transposed: the flat walk and channel blocks.
    (((1, 4, 5, 6), (4, 3, 3, 3), 1), ((1, 32, 3, 4), (32, 3, 3, 2), 2)),
)
def test_convolution_32_bit_offsets(
    input_shape,
    weight_shape,
    groups,
    dtype,
    rtol,
    device,
    implementation_index,
    monkeypatch,
):
    if not TRITON_INTERPRETER:
        pytest.skip(
            "the GPU kernel's 32-bit offsets, which only Triton's interpreter "
            "checks for overflow"
        )
    from infini.ops.native.cuda import convolution

    monkeypatch.setattr(convolution, "INTERPRETER_LONG_OFFSETS", False)
    infini.ops.Convolution.clear_cache()
    input = random_tensor(input_shape, dtype, device, "channels_last")
    weight = random_tensor(weight_shape, dtype, device)
    bias = random_tensor((weight_shape[1] * groups,), dtype, device)
    arguments = ([2, 1], [1], [1, 2], True, [1, 0], groups)
    expected = _reference(input, weight, bias, *arguments)
    out = empty_out(expected.shape, dtype, device)
    try:
        _call(input, weight, bias, *arguments, out, 0)
    finally:
        infini.ops.Convolution.clear_cache()
    assert_matches(out, expected, dtype, rtol)


def test_convolution_transposed_out_aliases_input(device, implementation_index):
    # A 1x1 transposed convolution keeps the shape: `out` may be `input`.
    input = random_tensor((2, 4, 5), torch.float32, device)
    weight = random_tensor((4, 4, 1), torch.float32, device)
    arguments = ([1], [0], [1], True, [0], 1)
    expected = _reference(input, weight, None, *arguments)
    _call(input, weight, None, *arguments, input, implementation_index)
    assert_matches(input, expected, torch.float32, 1e-5)


@pytest.mark.parametrize(
    "shapes, stride, dilation, transposed, output_padding, groups, message",
    [
        (
            ((1, 4, 8), (6, 4, 3), (1, 6, 6)),
            [1],
            [1],
            False,
            [0, 0],
            1,
            "`output_padding` must have 1 entry",
        ),
        (
            ((1, 4, 8), (4, 3, 3), (1, 3, 11)),
            [2],
            [1],
            True,
            [2],
            1,
            "`output_padding` .* must be smaller than `stride` or `dilation`",
        ),
        (
            ((1, 4, 8), (3, 3, 3), (1, 3, 10)),
            [1],
            [1],
            True,
            [0],
            1,
            "must have as many rows as `input`",
        ),
        (
            ((1, 4, 8), (4, 3, 3), (1, 3, 11)),
            [1],
            [1],
            True,
            [0],
            1,
            r"`out` must have shape \(1, 3, 10\)",
        ),
        (
            ((4, 8), (6, 4, 3), (6, 6)),
            [1],
            [1],
            False,
            [0],
            1,
            "`input` must have 3 dimensions",
        ),
        (
            ((1, 4, 2, 2, 2, 2), (6, 4, 1, 1, 1, 1), (1, 6, 2, 2, 2, 2)),
            [1],
            [1],
            False,
            [0],
            1,
            "`weight` must have 3, 4 or 5 dimensions",
        ),
    ],
)
def test_convolution_rejects(
    shapes,
    stride,
    dilation,
    transposed,
    output_padding,
    groups,
    message,
    device,
    implementation_index,
):
    input, weight, out = (torch.randn(shape) for shape in shapes)
    with pytest.raises(ValueError, match=message) as raised:
        _call(
            input,
            weight,
            None,
            stride,
            [0],
            dilation,
            transposed,
            output_padding,
            groups,
            out,
            implementation_index,
        )
    assert "convolution" in str(raised.value)
