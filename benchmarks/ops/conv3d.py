"""`conv3d` at a small video shape (a 3x7x7 stem over 8 frames) and a 3x3x3
block, with the transposed `convolution` and `conv_infinilm` (which share
the kernels) at one shape each.

Convolutions have no token dimension: the cases run once, at the prefill
point (512 tokens), whatever the grid asks for."""

import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import Case

PREFILL_TOKENS = 512

# input, weight, stride, padding.
SHAPES = (
    ((1, 3, 8, 112, 112), (64, 3, 3, 7, 7), (1, 2, 2), (1, 3, 3)),
    ((1, 64, 8, 28, 28), (64, 64, 3, 3, 3), (1, 1, 1), (1, 1, 1)),
)


def cases(tokens, dtype):
    if tokens != PREFILL_TOKENS:
        return
    for input_shape, weight_shape, stride, padding in SHAPES:
        input = torch.randn(input_shape, dtype=dtype)
        weight = torch.randn(weight_shape, dtype=dtype) / weight_shape[1] ** 0.5
        bias = torch.randn(weight_shape[0], dtype=dtype)
        out = F.conv3d(input, weight, bias, stride, padding)
        yield Case(
            f"{input_shape} x {weight_shape} stride {stride}",
            lambda i=input, w=weight, b=bias, s=stride, p=padding, o=out: (
                infini.ops.conv3d(i, w, b, list(s), list(p), [1], 1, o)
            ),
            lambda i=input, w=weight, b=bias, s=stride, p=padding: F.conv3d(
                i, w, b, s, p
            ),
            None,
            out.numel(),
        )
    # A transposed convolution (a 2x upsampling decoder layer).
    input = torch.randn(1, 128, 32, 32, dtype=dtype)
    weight = torch.randn(128, 64, 4, 4, dtype=dtype) / 128**0.5
    bias = torch.randn(64, dtype=dtype)
    out = F.conv_transpose2d(input, weight, bias, 2, 1)
    yield Case(
        "convolution transposed (1, 128, 32, 32) x (128, 64, 4, 4) stride 2",
        lambda: infini.ops.convolution(
            input, weight, bias, [2], [1], [1], True, [0], 1, out
        ),
        lambda: F.conv_transpose2d(input, weight, bias, 2, 1),
        None,
        out.numel(),
    )
    input = torch.randn(1, 64, 56, 56, dtype=dtype)
    weight = torch.randn(64, 64, 3, 3, dtype=dtype) / 8
    out = torch.empty(1, 64, 56, 56, dtype=dtype)
    yield Case(
        "conv_infinilm (1, 64, 56, 56) x (64, 64, 3, 3)",
        lambda: infini.ops.conv_infinilm(input, weight, None, [1], [1], [1], 1, out),
        lambda: F.conv2d(input, weight, None, 1, 1),
        None,
        out.numel(),
    )
