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

# input shape, weight shape, stride, padding, dilation, groups, bias.
CASES = (
    ((1, 3, 4, 6, 7), (4, 3, 2, 3, 3), [1], [0], [1], 1, True),
    ((2, 4, 5, 6, 6), (6, 2, 3, 3, 3), [1, 2, 2], [1, 1, 0], [1, 1, 2], 2, False),
    ((1, 4, 3, 4, 5), (8, 4, 1, 1, 1), [1], [0], [1], 1, True),
    ((1, 4, 4, 5, 5), (4, 1, 3, 3, 3), [1], [1], [1], 4, True),
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), [1], "same", [1], 1, True),
    ((2, 5, 4, 4), (3, 2, 3, 3, 3), [1], [1], [1], 1, False),
    # 16 or more input channels per group (channel blocks on GPUs).
    ((1, 16, 3, 4, 4), (8, 16, 2, 3, 3), [1], [1, 0, 1], [1], 1, True),
)


def _call(input, weight, bias, stride, padding, dilation, groups, out, index):
    infini.ops.conv3d(
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
def test_conv3d(
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
    expected = F.conv3d(
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
def test_conv3d_strided(dtype, rtol, device, implementation_index):
    input = random_tensor((1, 4, 3, 5, 6), dtype, device, "channels_last")
    weight = random_tensor((5, 4, 2, 3, 3), dtype, device, "strided")
    expected = F.conv3d(input.cpu().double(), weight.cpu().double(), None, 1, 1)
    out = empty_out(expected.shape, dtype, device, "strided")
    _call(input, weight, None, [1], [1], [1], 1, out, implementation_index)
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize(
    "shapes, stride, padding, groups, message",
    [
        (
            ((1, 4, 3, 5, 5), (6, 4, 3, 3, 3), (1, 6, 1, 3, 4)),
            [1],
            [0],
            1,
            r"`out` must have shape \(1, 6, 1, 3, 3\)",
        ),
        (
            ((1, 4, 3, 5, 5), (6, 4, 3, 3), (1, 6, 1, 3, 3)),
            [1],
            [0],
            1,
            "`weight` must have 5 dimensions",
        ),
        (
            ((1, 4, 3, 5, 5), (6, 4, 3, 3, 3), (1, 6, 1, 3, 3)),
            [1, 1],
            [0],
            1,
            "`stride` must have 1 or 3 entries",
        ),
        (
            ((1, 4, 3, 5, 5), (8, 4, 3, 3, 3), (1, 8, 1, 3, 3)),
            [1],
            [0],
            4,
            "expects 16 channels of `input`, got 4",
        ),
    ],
)
def test_conv3d_rejects(
    shapes, stride, padding, groups, message, device, implementation_index
):
    input, weight, out = (torch.randn(shape) for shape in shapes)
    with pytest.raises(ValueError, match=message) as raised:
        _call(
            input, weight, None, stride, padding, [1], groups, out, implementation_index
        )
    assert "conv3d" in str(raised.value)
