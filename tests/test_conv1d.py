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
    ((2, 4, 17), (6, 4, 3), [1], [1], [1], 1, True),
    ((1, 6, 30), (4, 6, 5), [3], [2], [2], 1, False),
    ((2, 8, 9), (16, 8, 1), [1], [0], [1], 1, True),
    # Depthwise, Mamba's causal convolution (padding K - 1).
    ((2, 12, 16), (12, 1, 4), [1], [3], [1], 12, True),
    ((1, 4, 11), (8, 1, 3), [2], [1], [1], 4, False),
    ((1, 6, 10), (9, 2, 3), [1], [0], [3], 3, True),
    ((1, 3, 10), (2, 3, 4), [1], "same", [1], 1, True),
    ((1, 3, 10), (2, 3, 3), [1], "valid", [1], 1, True),
    ((4, 9), (5, 4, 3), [1], [1], [1], 1, True),
    ((0, 3, 6), (2, 3, 3), [1], [1], [1], 1, True),
    # 16 or more input channels per group (channel blocks on GPUs).
    ((2, 20, 9), (24, 20, 3), [2], [2], [1], 1, True),
    # Depthwise with two outputs per channel, enough work to run in parallel.
    ((2, 64, 700), (128, 1, 3), [1], [1], [1], 64, True),
)


def _call(input, weight, bias, stride, padding, dilation, groups, out, index):
    infini.ops.conv1d(
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
def test_conv1d(
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
    expected = F.conv1d(
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
@pytest.mark.parametrize("kernel, groups", ((3, 1), (1, 1), (4, 6)))
def test_conv1d_strided(kernel, groups, dtype, rtol, device, implementation_index):
    # Time-major input (channels last) and an every-other-element `out`.
    input = random_tensor((2, 6, 13), dtype, device, "channels_last")
    weight = random_tensor((6, 6 // groups, kernel), dtype, device, "strided")
    bias = random_tensor((6,), dtype, device)
    expected = F.conv1d(
        input.cpu().double(),
        weight.cpu().double(),
        bias.cpu().double(),
        1,
        kernel - 1,
        1,
        groups,
    )
    out = empty_out(expected.shape, dtype, device, "strided")
    _call(
        input, weight, bias, [1], [kernel - 1], [1], groups, out, implementation_index
    )
    assert_matches(out, expected, dtype, rtol)


@pytest.mark.parametrize(
    "shapes, stride, padding, groups, message",
    [
        (
            ((1, 4, 8), (6, 3, 3), (1, 6, 6)),
            [1],
            [0],
            1,
            "expects 3 channels of `input`, got 4",
        ),
        (
            ((1, 4, 8), (6, 4, 3), (1, 6, 7)),
            [1],
            [0],
            1,
            r"`out` must have shape \(1, 6, 6\)",
        ),
        (
            ((1, 4, 8), (6, 4, 3), (1, 6, 8)),
            [1],
            "half",
            1,
            "`padding` must be 'valid', 'same'",
        ),
        (
            ((1, 4, 8), (6, 4, 3), (1, 6, 6)),
            [1, 1],
            [0],
            1,
            r"`stride` must have 1 entry \(one per",
        ),
        (
            ((2, 1, 4, 8), (6, 4, 3), (1, 6, 6)),
            [1],
            [0],
            1,
            "`input` must have 2 or 3 dimensions",
        ),
    ],
)
def test_conv1d_rejects(
    shapes, stride, padding, groups, message, device, implementation_index
):
    input, weight, out = (torch.randn(shape) for shape in shapes)
    with pytest.raises(ValueError, match=message) as raised:
        _call(
            input, weight, None, stride, padding, [1], groups, out, implementation_index
        )
    assert "conv1d" in str(raised.value)
