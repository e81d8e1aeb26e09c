"""sm_90 examples of the convolution family (`native/cuda/convolution.py`):
the implicit-GEMM kernel at realistic shapes in float16 and bfloat16 (tensor
cores), and float32/float64 calls (IEEE products, no spills), on each of the
kernel's three ways through the reduction (channel blocks per tap, flat,
direct)."""

from tests.sm90 import OTHER, PRODUCT, Example
from tests.sm90 import meta as m


def _channels_last(shape, dtype):
    """A tensor of `shape` whose channel dimension (1) is stored last."""
    order = (0, *range(2, len(shape)), 1)
    strides, running = [0] * len(shape), 1
    for dim in reversed(order):
        strides[dim] = running
        running *= shape[dim]
    return m(shape, dtype, strides)


def _conv(input, weight, out, dtype, stride=(1,), padding=(1,), groups=1, **extra):
    """The arguments of a convolution call, `channels_last` operands when
    `extra` asks for them."""
    layout = _channels_last if extra.pop("channels_last", False) else m
    return {
        "input": layout(input, dtype),
        "weight": layout(weight, dtype),
        "bias": m((out[1],), dtype),
        "stride": list(stride),
        "padding": list(padding) if not isinstance(padding, str) else padding,
        "dilation": [1],
        "groups": groups,
        "out": layout(out, dtype),
        **extra,
    }


def _conv2d_resnet(dtype, channels_last=False):
    """A ResNet 3x3 layer: 64 -> 64 channels on 56 x 56."""
    return lambda: _conv(
        (8, 64, 56, 56),
        (64, 64, 3, 3),
        (8, 64, 56, 56),
        dtype,
        channels_last=channels_last,
    )


def _conv2d_stem(dtype):
    """The 7x7 stride-2 stem on RGB: 3 input channels (the flat walk)."""
    return lambda: _conv(
        (8, 3, 224, 224), (64, 3, 7, 7), (8, 64, 112, 112), dtype, (2,), (3,)
    )


def _conv2d_depthwise(dtype):
    """A MobileNet depthwise 3x3 layer (the direct walk)."""
    return lambda: _conv(
        (8, 128, 56, 56), (128, 1, 3, 3), (8, 128, 56, 56), dtype, groups=128
    )


def _conv2d_depthwise_nhwc(dtype):
    """The depthwise layer on channels-last tensors (channels across the
    threads of a warp)."""
    return lambda: _conv(
        (8, 128, 56, 56),
        (128, 1, 3, 3),
        (8, 128, 56, 56),
        dtype,
        groups=128,
        channels_last=True,
    )


def _conv2d_pointwise(dtype):
    """A 1x1 bottleneck projection: 256 -> 64 channels on 28 x 28."""
    return lambda: _conv(
        (8, 256, 28, 28), (64, 256, 1, 1), (8, 64, 28, 28), dtype, padding=(0,)
    )


def _conv2d_grouped(dtype):
    """A ResNeXt grouped 3x3 layer: 32 groups of 4 channels (the flat walk)."""
    return lambda: _conv(
        (8, 128, 28, 28), (128, 4, 3, 3), (8, 128, 28, 28), dtype, groups=32
    )


def _conv1d_causal(dtype):
    """Mamba's depthwise causal convolution: kernel 4, padding 3."""
    return lambda: _conv(
        (4, 1024, 2048), (1024, 1, 4), (4, 1024, 2051), dtype, padding=(3,), groups=1024
    )


def _conv1d(dtype):
    return lambda: _conv((4, 256, 1024), (256, 256, 3), (4, 256, 1024), dtype)


def _conv3d(dtype):
    return lambda: _conv(
        (2, 64, 8, 28, 28), (64, 64, 3, 3, 3), (2, 64, 8, 28, 28), dtype
    )


def _transposed(dtype):
    """A 4x4 stride-2 upsampling layer: 64 -> 32 channels, 28 -> 56."""
    return lambda: _conv(
        (8, 64, 28, 28),
        (64, 32, 4, 4),
        (8, 32, 56, 56),
        dtype,
        (2,),
        (1,),
        transposed=True,
        output_padding=[0],
    )


def _convolution(dtype):
    return lambda: {
        **_conv2d_resnet(dtype)(),
        "transposed": False,
        "output_padding": [0],
    }


def _conv_infinilm(dtype):
    return _conv2d_resnet(dtype)


EXAMPLES = {
    "conv1d": [
        Example(_conv1d("float16"), PRODUCT, "float16 256->256 k3"),
        Example(_conv1d("bfloat16"), PRODUCT, "bfloat16 256->256 k3"),
        Example(_conv1d("float32"), OTHER, "float32 256->256 k3"),
        Example(_conv1d_causal("bfloat16"), OTHER, "bfloat16 causal depthwise k4"),
        Example(_conv1d_causal("float32"), OTHER, "float32 causal depthwise k4"),
    ],
    "conv2d": [
        Example(_conv2d_resnet("float16"), PRODUCT, "float16 64->64 3x3"),
        Example(_conv2d_resnet("bfloat16", True), PRODUCT, "bfloat16 NHWC 3x3"),
        Example(_conv2d_stem("float16"), PRODUCT, "float16 stem 7x7/2"),
        Example(_conv2d_resnet("float32"), OTHER, "float32 64->64 3x3"),
        Example(_conv2d_resnet("float64"), OTHER, "float64 64->64 3x3"),
        Example(_conv2d_stem("float32"), OTHER, "float32 stem 7x7/2"),
        Example(_conv2d_depthwise("float16"), OTHER, "float16 depthwise"),
        Example(_conv2d_depthwise("float32"), OTHER, "float32 depthwise"),
        Example(_conv2d_depthwise("float64"), OTHER, "float64 depthwise"),
        Example(_conv2d_depthwise_nhwc("float16"), OTHER, "float16 depthwise NHWC"),
        Example(_conv2d_pointwise("float16"), PRODUCT, "float16 1x1 256->64"),
        Example(_conv2d_pointwise("float32"), OTHER, "float32 1x1 256->64"),
        Example(_conv2d_grouped("bfloat16"), PRODUCT, "bfloat16 grouped 32x4"),
        Example(_conv2d_grouped("float32"), OTHER, "float32 grouped 32x4"),
        Example(_conv2d_resnet("float32", True), OTHER, "float32 NHWC 3x3"),
    ],
    "conv3d": [
        Example(_conv3d("float16"), PRODUCT, "float16 64->64 3x3x3"),
        Example(_conv3d("bfloat16"), PRODUCT, "bfloat16 64->64 3x3x3"),
        Example(_conv3d("float32"), OTHER, "float32 64->64 3x3x3"),
    ],
    "convolution": [
        Example(_convolution("float16"), PRODUCT, "float16 64->64 3x3"),
        Example(_convolution("bfloat16"), PRODUCT, "bfloat16 64->64 3x3"),
        Example(_transposed("float16"), PRODUCT, "float16 transposed 4x4/2"),
        Example(_transposed("bfloat16"), PRODUCT, "bfloat16 transposed 4x4/2"),
        Example(_convolution("float32"), OTHER, "float32 64->64 3x3"),
        Example(_transposed("float32"), OTHER, "float32 transposed 4x4/2"),
    ],
    "conv_infinilm": [
        Example(_conv_infinilm("float16"), PRODUCT, "float16 64->64 3x3"),
        Example(_conv_infinilm("bfloat16"), PRODUCT, "bfloat16 64->64 3x3"),
        Example(_conv_infinilm("float32"), OTHER, "float32 64->64 3x3"),
    ],
}
