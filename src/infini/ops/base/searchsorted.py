"""`searchsorted`: insertion points of values in sorted sequences."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class Searchsorted(Operator):
    """``out = torch.searchsorted(sorted_sequence, input, out_int32=...,
    right=..., side=..., sorter=...)``.

    `input` is a tensor of values or one float. `side` ("left"/"right")
    overrides `right` when given; `sorter` holds indices that sort an
    unsorted `sorted_sequence`. `out` is int64, or int32 with `out_int32`.
    The four overloads, in binding order, differ only in where `sorter` sits
    and in whether `input` is a float or a tensor. Served by ATen (slot 8).
    """

    name = "searchsorted"
    trace_name = "Searchsorted"
    overloads = (
        "sorted_sequence: Tensor, input: float, sorter: Tensor|None, "
        "out_int32: bool, right: bool, side: str|None, out: Tensor!",
        "sorted_sequence: Tensor, input: float, out_int32: bool, right: bool, "
        "side: str|None, sorter: Tensor|None, out: Tensor!",
        "sorted_sequence: Tensor, input: Tensor, sorter: Tensor|None, "
        "out_int32: bool, right: bool, side: str|None, out: Tensor!",
        "sorted_sequence: Tensor, input: Tensor, out_int32: bool, right: bool, "
        "side: str|None, sorter: Tensor|None, out: Tensor!",
    )
