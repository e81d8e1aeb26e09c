"""`mse_loss`: a loss with PyTorch's and the legacy `reduction` forms."""

from __future__ import annotations

from ._losses import Loss


class MseLoss(Loss):
    """``F.mse_loss(input, target, reduction=...)``: ``(input - target)^2``.

    Overload 1 is PyTorch's (`reduction` as a string, with the legacy
    `size_average`/`reduce` flags where it has them), overload 0 the
    original's deprecated one (`reduction` 0 none, 1 mean, 2 sum). A reduced
    result lands in `out` as ATen writes it (`out` may be larger scratch;
    read ``out.flatten()[0]``). `weight`, of `input`'s shape and dtype,
    multiplies the unreduced loss before the reduction, as in
    ``torch.nn.functional``. Served by ATen (slot 8).
    """

    name = "mse_loss"
    trace_name = "MseLoss"
    overloads = (
        "input: Tensor, target: Tensor, reduction: int, out: Tensor!",
        "input: Tensor, target: Tensor, weight: Tensor|None, size_average: "
        "bool|None, reduce: bool|None, reduction: str, out: Tensor!",
    )
    compatible_overload = 1
    aten_overload_aliases = {1: 0}
    elementwise_weight = True
