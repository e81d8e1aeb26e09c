"""`rearrange_infinilm`: ``out.copy_(input.expand_as(out))``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._unary import check_broadcasts_to


class RearrangeInfinilm(Operator):
    """``out.copy_(input.expand_as(out))``: copies `input` into the layout
    of `out` (row-major to column-major, padded rows, any strides).

    - `input` broadcasts to `out`'s shape; `out` must not broadcast.
    - One dtype for both, any of the twelve InfiniOps types and `bool`;
      elements are copied bit for bit.
    - Zero-size tensors are allowed; `out` may overlap `input` in any way
      (results are as if `input` were read first).
    """

    name = "rearrange_infinilm"
    trace_name = "RearrangeInfinilm"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.require_same_dtype("input", {"input": args.input, "out": args.out})
        check_broadcasts_to(self, "input", args.input, args.out)
