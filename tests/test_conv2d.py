import pytest
import torch
import torch.nn.functional as F

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from tests._convolution import (
    DTYPE_IDS,
    DTYPES,
    assert_matches,
    empty_out,
    random_tensor,
)

# input shape, weight shape, stride, padding, dilation, groups, bias.
CASES = (
    ((2, 4, 9, 8), (6, 4, 3, 3), [1], [1], [1], 1, True),
    ((1, 3, 15, 14), (5, 3, 7, 7), [2], [3], [1], 1, True),
    ((2, 8, 5, 6), (12, 8, 1, 1), [1], [0], [1], 1, False),
    ((1, 8, 7, 7), (4, 8, 1, 1), [2, 1], [0], [1], 1, True),
    ((2, 6, 8, 9), (9, 2, 3, 2), [1, 2], [2, 1], [2, 1], 3, True),
    ((1, 5, 7, 6), (5, 1, 3, 3), [1], [1], [1], 5, True),
    ((1, 4, 6, 7), (8, 1, 3, 2), [2, 1], [1, 0], [1, 2], 4, False),
    ((3, 2, 4, 5), (3, 2, 4, 5), [1], [0], [1], 1, True),
    ((1, 3, 6, 5), (2, 3, 2, 4), [1], "same", [2, 1], 1, True),
    ((1, 3, 6, 5), (2, 3, 3, 3), [3], "valid", [1], 1, False),
    ((0, 3, 6, 5), (2, 3, 3, 3), [1], [1], [1], 1, True),
    ((6, 5, 7), (4, 3, 3, 3), [1], [1], [1], 2, True),
    # 16 or more input channels per group: the GPU kernel walks each tap's
    # channels in blocks (two blocks per tap for 72 channels).
    ((1, 32, 5, 6), (8, 16, 3, 3), [1, 2], [1], [2, 1], 2, True),
    ((2, 72, 4, 5), (6, 72, 2, 3), [1], [1, 0], [1], 1, False),
)


def _call(input, weight, bias, stride, padding, dilation, groups, out, index):
    infini.ops.conv2d(
        input,
        weight,
        bias,
        stride,
        padding,
        dilation,
        groups,
        out,
        implementation_index=index,
    )


# PyTorch warns that its own 'same' padding with an even kernel copies.
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "input_shape, weight_shape, stride, padding, dilation, groups, with_bias", CASES
)
def test_conv2d(
    input_shape,
    weight_shape,
    stride,
    padding,
    dilation,
    groups,
    with_bias,
    dtype,
    rtol,
    device,
    implementation_index,
):
    input = random_tensor(input_shape, dtype, device)
    weight = random_tensor(weight_shape, dtype, device)
    bias = random_tensor(weight_shape[:1], dtype, device) if with_bias else None
    expected = F.conv2d(
        input.cpu().double(),
        weight.cpu().double(),
        None if bias is None else bias.cpu().double(),
        stride,
        padding,
        dilation,
        groups,
    )
    out = empty_out(expected.shape, dtype, device)
    _call(
        input,
        weight,
        bias,
        stride,
        padding,
        dilation,
        groups,
        out,
        implementation_index,
    )
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "input_layout, weight_layout, out_layout",
    (
        ("channels_last", "contiguous", "strided"),
        ("strided", "channels_last", "contiguous"),
        ("contiguous", "strided", "channels_last"),
    ),
)
@pytest.mark.parametrize("kernel, groups", ((3, 1), (1, 1), (3, 4)))
def test_conv2d_layouts(
    input_layout,
    weight_layout,
    out_layout,
    kernel,
    groups,
    dtype,
    rtol,
    device,
    implementation_index,
):
    input = random_tensor((2, 4, 6, 7), dtype, device, input_layout)
    weight = random_tensor(
        (8, 4 // groups, kernel, kernel), dtype, device, weight_layout
    )
    bias = random_tensor((8,), dtype, device, "strided")
    padding = [kernel // 2]
    expected = F.conv2d(
        input.cpu().double(),
        weight.cpu().double(),
        bias.cpu().double(),
        1,
        padding,
        1,
        groups,
    )
    out = empty_out(expected.shape, dtype, device, out_layout)
    if out_layout == "channels_last":
        out = random_tensor(expected.shape, dtype, device, out_layout).fill_(
            float("nan")
        )
    _call(input, weight, bias, [1], padding, [1], groups, out, implementation_index)
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "layout, out_layout, groups",
    (("channels_last", "strided", 1), ("strided", "channels_last", 2)),
)
def test_conv2d_channel_blocks_layouts(
    layout, out_layout, groups, dtype, rtol, device, implementation_index
):
    # 32 input channels: channel blocks on GPUs, contiguous along the
    # channels in the channels-last layout, scattered in the strided one.
    input = random_tensor((2, 32, 4, 5), dtype, device, layout)
    weight = random_tensor((6, 32 // groups, 3, 3), dtype, device, layout)
    bias = random_tensor((6,), dtype, device, "strided")
    expected = F.conv2d(
        input.cpu().double(),
        weight.cpu().double(),
        bias.cpu().double(),
        (1, 2),
        1,
        (2, 1),
        groups,
    )
    out = empty_out(expected.shape, dtype, device, out_layout)
    if out_layout == "channels_last":
        out = random_tensor(expected.shape, dtype, device, out_layout).fill_(
            float("nan")
        )
    _call(input, weight, bias, [1, 2], [1], [2, 1], groups, out, implementation_index)
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("dtype, rtol", DTYPES[::2], ids=DTYPE_IDS[::2])
@pytest.mark.parametrize(
    "input_shape, weight_shape, groups",
    # The flat walk, channel blocks, and the direct (depthwise) walk.
    (
        ((2, 4, 6, 7), (6, 4, 3, 3), 1),
        ((1, 32, 4, 5), (6, 16, 3, 2), 2),
        ((1, 4, 5, 6), (8, 1, 3, 3), 4),
    ),
)
def test_conv2d_32_bit_offsets(
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
    infini.ops.Conv2d.clear_cache()
    input = random_tensor(input_shape, dtype, device, "channels_last")
    weight = random_tensor(weight_shape, dtype, device)
    bias = random_tensor(weight_shape[:1], dtype, device)
    expected = F.conv2d(
        input.double(), weight.double(), bias.double(), (2, 1), 1, (1, 2), groups
    )
    out = empty_out(expected.shape, dtype, device, "strided")
    try:
        _call(input, weight, bias, [2, 1], [1], [1, 2], groups, out, 0)
    finally:
        infini.ops.Conv2d.clear_cache()
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("kernel, groups", ((1, 1), (3, 1), (3, 4)))
def test_conv2d_out_aliases_input(kernel, groups, device, implementation_index):
    # `out` is `input` itself: the result must be computed from the input as
    # it was before the call.
    input = random_tensor((2, 4, 5, 6), torch.float32, device)
    weight = random_tensor((4, 4 // groups, kernel, kernel), torch.float32, device)
    expected = F.conv2d(
        input.cpu().double(), weight.cpu().double(), None, 1, kernel // 2, 1, groups
    )
    _call(
        input,
        weight,
        None,
        [1],
        [kernel // 2],
        [1],
        groups,
        input,
        implementation_index,
    )
    assert_matches(input, expected, torch.float32, 1e-5)


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "input_shape, tile_bytes",
    # Several items per tile, and tiles of a few output rows of one item.
    (((5, 3, 6, 7), 8192), ((2, 3, 9, 7), 1024)),
)
def test_conv2d_tiles(
    input_shape, tile_bytes, dtype, rtol, device, implementation_index, monkeypatch
):
    if device != "cpu" or implementation_index != 0:
        pytest.skip("tiles are a detail of the CPU implementation (slot 0)")
    from infini.ops.native.cpu import convolution

    monkeypatch.setattr(convolution, "TILE_BYTES", tile_bytes)
    infini.ops.Conv2d.clear_cache()
    input = random_tensor(input_shape, dtype, device)
    weight = random_tensor((4, 3, 3, 2), dtype, device)
    bias = random_tensor((4,), dtype, device)
    expected = F.conv2d(
        input.double(), weight.double(), bias.double(), 1, (1, 0), (1, 2)
    )
    out = empty_out(expected.shape, dtype, device)
    try:
        _call(input, weight, bias, [1], [1, 0], [1, 2], 1, out, 0)
    finally:
        infini.ops.Conv2d.clear_cache()
    assert_matches(out, expected, dtype, rtol)


def _tensors(
    input=(1, 4, 6, 6),
    weight=(6, 4, 3, 3),
    out=(1, 6, 4, 4),
    bias=None,
    dtype=torch.float32,
    weight_dtype=None,
):
    return (
        torch.randn(input).to(dtype),
        torch.randn(weight).to(weight_dtype or dtype),
        None if bias is None else torch.randn(bias).to(dtype),
        torch.empty(out, dtype=dtype),
    )


@pytest.mark.parametrize(
    "tensors, stride, padding, dilation, groups, message",
    [
        (
            _tensors(weight=(6, 3, 3, 3)),
            [1],
            [0],
            [1],
            1,
            "`weight` .* expects 3 channels of `input`, got 4",
        ),
        (
            _tensors(weight=(6, 2, 3, 3)),
            [1],
            [0],
            [1],
            3,
            "channels of `input` .* must be divisible by `groups` = 3",
        ),
        (
            _tensors(weight=(5, 2, 3, 3), out=(1, 5, 4, 4)),
            [1],
            [0],
            [1],
            2,
            "output channels of `weight` must be divisible by `groups` = 2",
        ),
        (_tensors(), [1], [0], [1], 0, "`groups` must be positive"),
        (
            _tensors(out=(1, 6, 5, 4)),
            [1],
            [0],
            [1],
            1,
            r"`out` must have shape \(1, 6, 4, 4\)",
        ),
        (_tensors(), [1], "full", [1], 1, "`padding` must be 'valid', 'same'"),
        (
            _tensors(out=(1, 6, 3, 3)),
            [2],
            "same",
            [1],
            1,
            "`padding` 'same' is not supported with `stride`",
        ),
        (_tensors(), [1], [-1], [1], 1, "`padding` must be non-negative"),
        (_tensors(), [0], [0], [1], 1, "`stride` must be positive"),
        (_tensors(), [1, 1, 1], [0], [1], 1, "`stride` must have 1 or 2 entries"),
        (_tensors(), [1], [0], [0], 1, "`dilation` must be positive"),
        (_tensors(bias=(5,)), [1], [0], [1], 1, r"`bias` must have shape \(6,\)"),
        (
            _tensors(weight=(6, 4, 3)),
            [1],
            [0],
            [1],
            1,
            "`weight` must have 4 dimensions",
        ),
        (
            _tensors(input=(1, 4, 2, 2)),
            [1],
            [0],
            [1],
            1,
            "output size .* must be positive",
        ),
        (
            _tensors(dtype=torch.int32, weight_dtype=torch.int32),
            [1],
            [0],
            [1],
            1,
            "`input` has dtype int32",
        ),
        (
            _tensors(weight_dtype=torch.float16),
            [1],
            [0],
            [1],
            1,
            "`weight` has dtype float16 but `input` has dtype float32",
        ),
    ],
)
def test_conv2d_rejects(
    tensors,
    stride,
    padding,
    dilation,
    groups,
    message,
    device,
    implementation_index,
):
    input, weight, bias, out = tensors
    with pytest.raises(ValueError, match=message) as raised:
        _call(
            input,
            weight,
            bias,
            stride,
            padding,
            dilation,
            groups,
            out,
            implementation_index,
        )
    assert "conv2d" in str(raised.value)
