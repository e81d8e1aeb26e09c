"""`conv_infinilm`: InfiniLM's convolution, with its argument order
(`padding` before `stride`)."""

from __future__ import annotations

from ._convolution import ConvolutionOperator


class ConvInfinilm(ConvolutionOperator):
    """An N-d convolution (1 to 3 spatial dimensions) taking its arguments
    in InfiniLM's order: ``(input, weight, bias, padding, stride, dilation,
    groups, out)``.

    InfiniCore's `conv` operator (which InfiniLM calls) describes a
    convolution by per-dimension `pads`, `strides` and `dilations` over
    ``(N, C, *spatial)`` tensors (NCHW-style, channels before the spatial
    dimensions), cross-correlating with a weight ``(C_out, C_in, *kernel)``
    and padding each spatial dimension symmetrically; it has no groups. The
    `groups` of this signature follow the original InfiniOps base: a weight
    ``(C_out, C_in / groups, *kernel)``. Beyond the argument order this is
    exactly `torch.nn.functional.conv{1,2,3}d(input, weight, bias, stride,
    padding, dilation, groups)` with a list `padding`:

    - `input` is batched, ``(N, C_in, *spatial)``; the rank of `weight`
      decides the spatial dimensions.
    - `padding`, `stride` and `dilation` take one entry per spatial
      dimension; a single entry is also accepted and repeated (PyTorch's
      rule; the original asserted one per dimension).
    - `bias` is `None` or ``(C_out,)``.

    See `ConvolutionOperator` for the rules shared by the family.
    """

    name = "conv_infinilm"
    trace_name = "ConvInfinilm"
    overloads = (
        "input: Tensor, weight: Tensor, bias: Tensor|None = None, padding: "
        "list[int], stride: list[int], dilation: list[int], groups: int, "
        "out: Tensor!",
    )
    defaults = {"bias": None}
