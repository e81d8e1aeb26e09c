"""`tensordot`: contraction of two tensors over given dimensions."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class Tensordot(Operator):
    """``out = torch.tensordot(input, other, dims=(dims_self, dims_other))``:
    the dimensions `dims_self` of the first tensor are summed against
    `dims_other` of the second (pairwise, equal sizes); the result has the
    remaining dimensions of the first tensor, then of the second.

    The other two overloads name the tensors `a` and `b`: ``dims: int``
    contracts the last `dims` dimensions of `a` with the first `dims` of `b`;
    ``dims: [[int], [int]]`` gives the two lists. Served by ATen (slot 8),
    which the other forms reach through the first.
    """

    name = "tensordot"
    trace_name = "Tensordot"
    overloads = (
        "input: Tensor, other: Tensor, dims_self: list[int], dims_other: list[int], "
        "out: Tensor!",
        "a: Tensor, b: Tensor, dims: int, out: Tensor!",
        "a: Tensor, b: Tensor, dims: list[list[int]], out: Tensor!",
    )
    defaults = {"dims_self": None, "dims_other": None, "dims": None}
    # Overloads 1 and 2 call ATen through overload 0 (`aten_arguments`).
    aten_overload_aliases = {1: 0, 2: 0}

    def __init__(self, args) -> None:
        super().__init__(args)
        if args.overload_index == 0:
            self.dims_pair = (tuple(args.dims_self), tuple(args.dims_other))
            return
        a, b = args.a, args.b
        if args.overload_index == 1:
            count = args.dims
            if not 0 <= count <= min(a.ndim, b.ndim):
                raise self.error(
                    f"`dims` must be between 0 and {min(a.ndim, b.ndim)} for `a` "
                    f"{a.shape} and `b` {b.shape}, got {count}."
                )
            self.dims_pair = (
                tuple(range(a.ndim - count, a.ndim)),
                tuple(range(count)),
            )
        else:
            if len(args.dims) != 2:
                raise self.error(
                    "`dims` must hold two lists (of `a`'s and `b`'s dimensions), "
                    f"got {len(args.dims)}."
                )
            self.dims_pair = (tuple(args.dims[0]), tuple(args.dims[1]))
        if len(self.dims_pair[0]) != len(self.dims_pair[1]):
            raise self.error(
                f"`dims` must list as many dimensions of `a` as of `b`, got "
                f"{list(self.dims_pair[0])} and {list(self.dims_pair[1])}."
            )

    def aten_arguments(self, args) -> tuple[dict, dict]:
        """The first overload's arguments (`input`, `other`, the two lists)."""
        scalars = {
            "dims_self": list(self.dims_pair[0]),
            "dims_other": list(self.dims_pair[1]),
        }
        if args.overload_index == 0:
            return scalars, {}
        return (
            scalars,
            {"input": "a", "other": "b"},
        )
