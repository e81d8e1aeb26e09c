"""`soft_margin_loss`: a loss with PyTorch's and the legacy `reduction` forms."""

from __future__ import annotations

from ._losses import Loss


class SoftMarginLoss(Loss):
    """``F.soft_margin_loss(input, target, reduction=...)``: ``log(1 + exp(-target *
    input))``.

    Overload 0 is PyTorch's (`reduction` as a string, with the legacy
    `size_average`/`reduce` flags where it has them), overload 1 the
    original's deprecated one (`reduction` 0 none, 1 mean, 2 sum). A reduced
    result lands in `out` as ATen writes it (`out` may be larger scratch;
    read ``out.flatten()[0]``). Served by ATen (slot 8).
    """

    name = "soft_margin_loss"
    trace_name = "SoftMarginLoss"
    overloads = (
        "input: Tensor, target: Tensor, size_average: bool|None, reduce: bool|None, "
        "reduction: str, out: Tensor!",
        "input: Tensor, target: Tensor, reduction: int, out: Tensor!",
    )
    compatible_overload = 0
    aten_overload_aliases = {0: 1}
