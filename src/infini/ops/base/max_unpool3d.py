"""`max_unpool3d`: the inverse of `max_pool3d` (PyTorch's
`max_unpool3d`)."""

from __future__ import annotations

from ._unpooling import MaxUnpool


class MaxUnpool3d(MaxUnpool):
    """``F.max_unpool3d`` into `out`; see `MaxUnpool` for the two
    overloads. Served by ATen (slot 8)."""

    name = "max_unpool3d"
    trace_name = "MaxUnpool3d"
    overloads = (
        "input: Tensor, indices: Tensor, kernel_size: list[int], stride: "
        "list[int]|None = None, padding: list[int], output_size: list[int]|None "
        "= None, out: Tensor!",
        "input: Tensor, indices: Tensor, output_size: list[int], stride: "
        "list[int], padding: list[int], out: Tensor!",
    )
    spatial_dims = 3
    defaults = {"stride": None, "output_size": None}
    aten_overload_aliases = {0: 1}
