import pytest
import torch
import torch.nn.functional as F

import infini.ops
from tests._convolution import (
    DTYPE_IDS,
    DTYPES,
    assert_matches,
    empty_out,
    random_tensor,
)

# input shape, weight shape, padding, stride, dilation, groups, bias: the
# InfiniLM order, `padding` first.
CASES = (
    ((2, 4, 11), (6, 4, 3), [1], [2], [1], 1, True),
    ((1, 4, 7, 8), (6, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1, True),
    ((2, 4, 7, 8), (6, 2, 3, 2), [2, 0], [2, 1], [1, 3], 2, False),
    ((1, 8, 6, 6), (8, 1, 3, 3), [1, 1], [1, 1], [1, 1], 8, True),
    ((1, 3, 4, 5, 6), (4, 3, 3, 3, 3), [1, 1, 1], [1, 2, 2], [1, 1, 1], 1, True),
    ((1, 8, 4, 4), (16, 8, 1, 1), [0], [1], [1], 1, False),
    # 16 or more input channels per group (channel blocks on GPUs).
    ((1, 16, 5, 5), (8, 16, 3, 3), [1, 1], [2, 1], [1, 2], 1, True),
)


def _call(input, weight, bias, padding, stride, dilation, groups, out, index):
    infini.ops.conv_infinilm(
        input,
        weight,
        bias,
        padding,
        stride,
        dilation,
        groups,
        out,
        implementation_index=index,
    )


def _reference(input, weight, bias, padding, stride, dilation, groups):
    function = (F.conv1d, F.conv2d, F.conv3d)[weight.ndim - 3]
    return function(
        input.cpu().double(),
        weight.cpu().double(),
        None if bias is None else bias.cpu().double(),
        stride,
        padding,
        dilation,
        groups,
    )


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "input_shape, weight_shape, padding, stride, dilation, groups, with_bias", CASES
)
def test_conv_infinilm(
    input_shape,
    weight_shape,
    padding,
    stride,
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
    expected = _reference(input, weight, bias, padding, stride, dilation, groups)
    out = empty_out(expected.shape, dtype, device)
    _call(
        input,
        weight,
        bias,
        padding,
        stride,
        dilation,
        groups,
        out,
        implementation_index,
    )
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize("dtype, rtol", DTYPES, ids=DTYPE_IDS)
def test_conv_infinilm_strided(dtype, rtol, device, implementation_index):
    input = random_tensor((2, 4, 6, 7), dtype, device, "channels_last")
    weight = random_tensor((6, 4, 3, 3), dtype, device, "strided")
    bias = random_tensor((6,), dtype, device)
    expected = _reference(input, weight, bias, [1, 0], [1, 2], [1, 1], 1)
    out = empty_out(expected.shape, dtype, device, "strided")
    _call(input, weight, bias, [1, 0], [1, 2], [1, 1], 1, out, implementation_index)
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize(
    "shapes, padding, stride, groups, message",
    [
        (
            ((1, 4, 6, 6), (6, 4, 3, 3), (1, 6, 4, 4)),
            [1, 1],
            [1, 1],
            1,
            r"`out` must have shape \(1, 6, 6, 6\)",
        ),
        (
            ((4, 6, 6), (6, 4, 3, 3), (6, 4, 4)),
            [0],
            [1],
            1,
            "`input` must have 4 dimensions",
        ),
        (
            ((1, 4, 6, 6), (6, 4, 3, 3), (1, 6, 4, 4)),
            [0],
            [1],
            3,
            "divisible by `groups` = 3",
        ),
        (
            ((1, 4, 6, 6), (6, 4, 3, 3), (1, 6, 4, 4)),
            [0, 0, 0],
            [1],
            1,
            "`padding` must have 1 or 2 entries",
        ),
    ],
)
def test_conv_infinilm_rejects(
    shapes, padding, stride, groups, message, device, implementation_index
):
    input, weight, out = (torch.randn(shape) for shape in shapes)
    with pytest.raises(ValueError, match=message) as raised:
        _call(
            input, weight, None, padding, stride, [1], groups, out, implementation_index
        )
    assert "conv_infinilm" in str(raised.value)
