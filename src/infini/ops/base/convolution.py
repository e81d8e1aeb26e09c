"""`convolution`: an N-d convolution or transposed convolution (ATen's
`convolution`)."""

from __future__ import annotations

from ._convolution import ConvolutionOperator


class Convolution(ConvolutionOperator):
    """``out = torch.ops.aten.convolution(input, weight, bias, stride,
    padding, dilation, transposed, output_padding, groups)``.

    - `input` is batched, ``(N, C_in, *spatial)`` with 1 to 3 spatial
      dimensions; the rank of `weight` (``spatial + 2``) must match it.
    - Not `transposed`: `torch.nn.functional.conv{1,2,3}d`, `weight`
      ``(C_out, C_in / groups, *kernel)``; `output_padding` is checked
      (1 entry or one per spatial dimension, non-negative) and otherwise
      ignored, as ATen ignores it.
    - `transposed`: `torch.nn.functional.conv_transpose{1,2,3}d`, `weight`
      ``(C_in, C_out / groups, *kernel)``, each spatial output size
      ``(in - 1) * stride - 2 * padding + dilation * (kernel - 1) +
      output_padding + 1``; each `output_padding` entry must be smaller
      than the stride or the dilation of its dimension.
    - `bias` is `None` or ``(C_out,)``.

    See `ConvolutionOperator` for the rules shared by the family.
    """

    name = "convolution"
    trace_name = "Convolution"
    overloads = (
        "input: Tensor, weight: Tensor, bias: Tensor|None = None, stride: "
        "list[int], padding: list[int], dilation: list[int], transposed: bool, "
        "output_padding: list[int], groups: int, out: Tensor!",
    )
    defaults = {"bias": None}
