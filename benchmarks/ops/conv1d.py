"""`conv1d` at the shapes of audio encoders (Whisper's second convolution)
and of Mamba's depthwise causal convolution.

Convolutions have no token dimension: the cases run once, at the prefill
point (512 tokens), whatever the grid asks for."""

import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import Case, nbytes

PREFILL_TOKENS = 512

# input, weight, stride, padding, groups.
SHAPES = (
    ((4, 512, 1024), (512, 512, 3), 1, 1, 1),
    ((1, 80, 3000), (384, 80, 3), 1, 1, 1),
    ((1, 1536, 128), (1536, 1, 4), 1, 3, 1536),
)


def cases(tokens, dtype):
    if tokens != PREFILL_TOKENS:
        return
    for input_shape, weight_shape, stride, padding, groups in SHAPES:
        input = torch.randn(input_shape, dtype=dtype)
        weight = torch.randn(weight_shape, dtype=dtype) / weight_shape[1] ** 0.5
        bias = torch.randn(weight_shape[0], dtype=dtype)
        out = F.conv1d(input, weight, bias, stride, padding, 1, groups)
        depthwise = groups > 1
        yield Case(
            f"{input_shape} x {weight_shape} groups {groups}",
            lambda i=input, w=weight, b=bias, s=stride, p=padding, g=groups, o=out: (
                infini.ops.conv1d(i, w, b, [s], [p], [1], g, o)
            ),
            lambda i=input, w=weight, b=bias, s=stride, p=padding, g=groups: F.conv1d(
                i, w, b, s, p, 1, g
            ),
            # The depthwise convolution is memory-bound.
            nbytes(input, weight, out) if depthwise else None,
            out.numel(),
        )
