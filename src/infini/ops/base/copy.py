"""`copy`: ``out.copy_(src, non_blocking)``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._unary import check_broadcasts_to


class Copy(Operator):
    """``out.copy_(src, non_blocking)``: every element of `out` takes the
    value of the matching element of `src`.

    - `src` broadcasts to `out`'s shape (missing leading dimensions,
      size-1 or stride-0 dimensions); `out` must not broadcast.
    - Any dtype pair (the twelve InfiniOps types and `bool`): values are
      converted as `cast` converts them (torch's CPU rules); the same dtype
      is a bit copy (NaN payloads kept).
    - Any strides; zero-size tensors are allowed.
    - `out` may overlap `src` in any way: results are as if `src` were read
      first.
    - `non_blocking` only matters for copies between host and device
      memory; on one device the copy is ordered on the caller's stream.
    """

    name = "copy"
    trace_name = "Copy"
    overloads = ("src: Tensor, non_blocking: bool, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        check_broadcasts_to(self, "src", args.src, args.out)
