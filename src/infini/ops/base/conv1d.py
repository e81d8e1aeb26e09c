"""`conv1d`: a 1-d convolution (PyTorch's `torch.nn.functional.conv1d`)."""

from __future__ import annotations

from ._convolution import ConvolutionOperator


class Conv1d(ConvolutionOperator):
    """``out = torch.nn.functional.conv1d(input, weight, bias, stride,
    padding, dilation, groups)``: cross-correlation of `input`
    ``(N, C_in, L)`` or unbatched ``(C_in, L)`` with `weight`
    ``(C_out, C_in / groups, K)``, plus `bias` ``(C_out,)`` when given.

    See `ConvolutionOperator` for the rules shared by the family: `stride`,
    `dilation` and a list `padding` take 1 entry or one per spatial
    dimension; `padding` may also be ``"valid"`` (no padding) or ``"same"``
    (output as long as the input, stride 1 only, an odd total of zeros
    putting the extra one after the input, as PyTorch does).
    """

    name = "conv1d"
    trace_name = "Conv1d"
    overloads = (
        "input: Tensor, weight: Tensor, bias: Tensor|None = None, stride: "
        "list[int], padding: str, dilation: list[int], groups: int, out: Tensor!",
        "input: Tensor, weight: Tensor, bias: Tensor|None = None, stride: "
        "list[int], padding: list[int], dilation: list[int], groups: int, "
        "out: Tensor!",
    )
    defaults = {"bias": None}
    spatial_dims = 1
    allow_unbatched = True
