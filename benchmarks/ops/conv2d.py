"""`conv2d` at the shapes of image models (ResNet-50's stages and stem).

Convolutions have no token dimension: the cases run once, at the prefill
point (512 tokens), whatever the grid asks for."""

import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import Case

PREFILL_TOKENS = 512

# input, weight, stride, padding, groups.
SHAPES = (
    ((1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
    ((8, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    ((1, 256, 28, 28), (512, 256, 1, 1), 1, 0, 1),
    ((1, 128, 28, 28), (128, 1, 3, 3), 1, 1, 128),
)


def cases(tokens, dtype):
    if tokens != PREFILL_TOKENS:
        return
    for input_shape, weight_shape, stride, padding, groups in SHAPES:
        input = torch.randn(input_shape, dtype=dtype)
        weight = torch.randn(weight_shape, dtype=dtype) / weight_shape[1] ** 0.5
        bias = torch.randn(weight_shape[0], dtype=dtype)
        out = F.conv2d(input, weight, bias, stride, padding, 1, groups)
        yield Case(
            f"{input_shape} x {weight_shape} stride {stride} groups {groups}",
            lambda i=input, w=weight, b=bias, s=stride, p=padding, g=groups, o=out: (
                infini.ops.conv2d(i, w, b, [s], [p], [1], g, o)
            ),
            lambda i=input, w=weight, b=bias, s=stride, p=padding, g=groups: F.conv2d(
                i, w, b, s, p, 1, g
            ),
            None,
            out.numel(),
        )
