"""`argsort`: the indices that sort `input` along a dimension."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class Argsort(Operator):
    """``out = torch.argsort(input, dim=dim, descending=descending,
    stable=stable)`` (int64 indices). The second overload is the original's
    deprecated argument order ``(input, stable, dim, descending, out)``; the
    binder tells them apart because `bool` parameters accept only
    ``True``/``False`` in its strict pass. Served by ATen (slot 8)."""

    name = "argsort"
    trace_name = "Argsort"
    overloads = (
        "input: Tensor, dim: int, descending: bool, stable: bool, out: Tensor!",
        "input: Tensor, stable: bool, dim: int, descending: bool, out: Tensor!",
    )
