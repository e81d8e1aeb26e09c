"""`max_unpool2d`: the inverse of `max_pool2d` (PyTorch's
`max_unpool2d`)."""

from __future__ import annotations

from ._unpooling import MaxUnpool


class MaxUnpool2d(MaxUnpool):
    """``F.max_unpool2d`` into `out`; see `MaxUnpool` for the two
    overloads. Served by ATen (slot 8)."""

    name = "max_unpool2d"
    trace_name = "MaxUnpool2d"
    overloads = (
        "input: Tensor, indices: Tensor, kernel_size: list[int], stride: "
        "list[int]|None = None, padding: list[int], output_size: list[int]|None "
        "= None, out: Tensor!",
        "input: Tensor, indices: Tensor, output_size: list[int], out: Tensor!",
    )
    spatial_dims = 2
    defaults = {"stride": None, "output_size": None}
    aten_overload_aliases = {0: 1}
