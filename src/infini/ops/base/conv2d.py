"""`conv2d`: a 2-d convolution (PyTorch's `torch.nn.functional.conv2d`)."""

from __future__ import annotations

from ._convolution import ConvolutionOperator


class Conv2d(ConvolutionOperator):
    """``out = torch.nn.functional.conv2d(input, weight, bias, stride,
    padding, dilation, groups)``: cross-correlation of `input`
    ``(N, C_in, H, W)`` or unbatched ``(C_in, H, W)`` with `weight`
    ``(C_out, C_in / groups, K_h, K_w)``, plus `bias` ``(C_out,)`` when given.

    See `ConvolutionOperator` for the rules shared by the family: `stride`,
    `dilation` and a list `padding` take 1 entry or one per spatial
    dimension; `padding` may also be ``"valid"`` (no padding) or ``"same"``
    (output as long as the input, stride 1 only, an odd total of zeros
    putting the extra one after the input, as PyTorch does).
    """

    name = "conv2d"
    trace_name = "Conv2d"
    overloads = (
        "input: Tensor, weight: Tensor, bias: Tensor|None = None, stride: "
        "list[int], padding: str, dilation: list[int], groups: int, out: Tensor!",
        "input: Tensor, weight: Tensor, bias: Tensor|None = None, stride: "
        "list[int], padding: list[int], dilation: list[int], groups: int, "
        "out: Tensor!",
    )
    defaults = {"bias": None}
    spatial_dims = 2
    allow_unbatched = True
