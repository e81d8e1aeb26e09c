"""`nll_loss`: a loss with PyTorch's and the legacy `reduction` forms."""

from __future__ import annotations

from ._losses import Loss


class NllLoss(Loss):
    """``F.nll_loss(input, target, weight, ignore_index=..., reduction=...)``:
    ``-w[y] x[y]`` per sample; `mean` divides by the summed weights.

    Overload 0 is PyTorch's (`reduction` as a string, with the legacy
    `size_average`/`reduce` flags where it has them), overload 1 the
    original's deprecated one (`reduction` 0 none, 1 mean, 2 sum). A reduced
    result lands in `out` as ATen writes it (`out` may be larger scratch;
    read ``out.flatten()[0]``). Served by ATen (slot 8).
    """

    name = "nll_loss"
    trace_name = "NllLoss"
    overloads = (
        "input: Tensor, target: Tensor, weight: Tensor|None, size_average: "
        "bool|None, ignore_index: int, reduce: bool|None, reduction: str, out: "
        "Tensor!",
        "input: Tensor, target: Tensor, weight: Tensor|None, reduction: int, "
        "ignore_index: int, out: Tensor!",
    )
    compatible_overload = 0
    aten_overload_aliases = {0: 1}
