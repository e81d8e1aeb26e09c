"""`binary_cross_entropy`: a loss with PyTorch's and the legacy `reduction` forms."""

from __future__ import annotations

from ._losses import Loss


class BinaryCrossEntropy(Loss):
    """``F.binary_cross_entropy(input, target, weight, reduction=...)``: ``-w (t
    log(x) + (1 - t) log(1 - x))``, the logs clamped at -100.

    Overload 0 is PyTorch's (`reduction` as a string, with the legacy
    `size_average`/`reduce` flags where it has them), overload 1 the
    original's deprecated one (`reduction` 0 none, 1 mean, 2 sum). A reduced
    result lands in `out` as ATen writes it (`out` may be larger scratch;
    read ``out.flatten()[0]``). Served by ATen (slot 8).
    """

    name = "binary_cross_entropy"
    trace_name = "BinaryCrossEntropy"
    overloads = (
        "input: Tensor, target: Tensor, weight: Tensor|None, size_average: "
        "bool|None, reduce: bool|None, reduction: str, out: Tensor!",
        "input: Tensor, target: Tensor, weight: Tensor|None, reduction: int, out: "
        "Tensor!",
    )
    compatible_overload = 0
    aten_overload_aliases = {0: 1}
