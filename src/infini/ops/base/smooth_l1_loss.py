"""`smooth_l1_loss`: a loss with PyTorch's and the legacy `reduction` forms."""

from __future__ import annotations

from ._losses import Loss


class SmoothL1Loss(Loss):
    """``F.smooth_l1_loss(input, target, reduction=..., beta=beta)``: ``0.5 d^2 /
    beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``.

    Overload 0 is PyTorch's (`reduction` as a string, with the legacy
    `size_average`/`reduce` flags where it has them), overload 1 the
    original's deprecated one (`reduction` 0 none, 1 mean, 2 sum). A reduced
    result lands in `out` as ATen writes it (`out` may be larger scratch;
    read ``out.flatten()[0]``). Served by ATen (slot 8).
    """

    name = "smooth_l1_loss"
    trace_name = "SmoothL1Loss"
    overloads = (
        "input: Tensor, target: Tensor, size_average: bool|None, reduce: bool|None, "
        "reduction: str, beta: float, out: Tensor!",
        "input: Tensor, target: Tensor, reduction: int, beta: float, out: Tensor!",
    )
    compatible_overload = 0
    aten_overload_aliases = {0: 1}
