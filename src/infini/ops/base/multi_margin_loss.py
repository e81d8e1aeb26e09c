"""`multi_margin_loss`: a loss with PyTorch's and the legacy `reduction` forms."""

from __future__ import annotations

from ._losses import Loss


class MultiMarginLoss(Loss):
    """``F.multi_margin_loss(input, target, p, margin, weight, reduction=...)``: per
    sample, ``sum_j max(0, margin - x[y] + x[j])^p / C`` over ``j != y``.

    Overload 0 is PyTorch's (`reduction` as a string, with the legacy
    `size_average`/`reduce` flags where it has them), overload 1 the
    original's deprecated one (`reduction` 0 none, 1 mean, 2 sum). A reduced
    result lands in `out` as ATen writes it (`out` may be larger scratch;
    read ``out.flatten()[0]``). Served by ATen (slot 8).
    """

    name = "multi_margin_loss"
    trace_name = "MultiMarginLoss"
    overloads = (
        "input: Tensor, target: Tensor, weight: Tensor|None, p: int, margin: float, "
        "size_average: bool|None, reduce: bool|None, reduction: str, out: Tensor!",
        "input: Tensor, target: Tensor, p: float, margin: float, weight: "
        "Tensor|None, reduction: int, out: Tensor!",
    )
    compatible_overload = 0
    aten_overload_aliases = {0: 1}
