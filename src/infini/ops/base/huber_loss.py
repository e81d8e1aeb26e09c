"""`huber_loss`: a loss with PyTorch's and the legacy `reduction` forms."""

from __future__ import annotations

from ._losses import Loss


class HuberLoss(Loss):
    """``F.huber_loss(input, target, reduction=..., delta=delta)``: ``0.5 d^2``
    where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``, with ``d = input -
    target``.

    Overload 1 is PyTorch's (`reduction` as a string, with the legacy
    `size_average`/`reduce` flags where it has them), overload 0 the
    original's deprecated one (`reduction` 0 none, 1 mean, 2 sum). A reduced
    result lands in `out` as ATen writes it (`out` may be larger scratch;
    read ``out.flatten()[0]``). `weight`, of `input`'s shape and dtype,
    multiplies the unreduced loss before the reduction, as in
    ``torch.nn.functional``. Served by ATen (slot 8).
    """

    name = "huber_loss"
    trace_name = "HuberLoss"
    overloads = (
        "input: Tensor, target: Tensor, reduction: int, delta: float, out: Tensor!",
        "input: Tensor, target: Tensor, weight: Tensor|None, reduction: str, delta: "
        "float, out: Tensor!",
    )
    compatible_overload = 1
    aten_overload_aliases = {1: 0}
    elementwise_weight = True
