"""The legacy `reduction` rules shared by the loss operators (docs/behaviour.md, "Loss
reductions").

Each loss has a PyTorch-compatible overload (`size_average`, `reduce`,
`reduction` as a string) and the original's deprecated one (`reduction` as
ATen's integer: 0 none, 1 mean, 2 sum). ATen takes the integer, so the
compatible overload is resolved to it (`aten_overload_aliases` and
`aten_arguments` in each base).
"""

from __future__ import annotations

from infini.ops.core.operator import Operator

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def legacy_reduction(operator: Operator, size_average, reduce, reduction) -> int:
    """``torch.nn._reduction.legacy_get_enum``: `reduction` when both legacy
    flags are `None`; else none if `reduce` is False, sum if `size_average`
    is False, mean otherwise."""
    if size_average is None and reduce is None:
        if isinstance(reduction, str):
            if reduction not in REDUCTIONS:
                raise operator.error(
                    f"`reduction` must be 'none', 'mean' or 'sum', got {reduction!r}."
                )
            return REDUCTIONS[reduction]
        if reduction not in (0, 1, 2):
            raise operator.error(
                f"`reduction` must be 0 (none), 1 (mean) or 2 (sum), got {reduction}."
            )
        return reduction
    if reduce is False:
        return 0
    if size_average is False:
        return 2
    return 1


class Loss(Operator):
    """A loss whose overloads differ in how they say `reduction`."""

    # Filled by subclasses: the index of the PyTorch-compatible overload.
    compatible_overload = 0
    # Whether the compatible overload's `weight` is a per-element weight
    # that ATen's schema lacks: the backend multiplies the unreduced loss
    # by it before reducing, as `torch.nn.functional` does.
    elementwise_weight = False
    # A reduced result lands in the first element of `out`, whatever its
    # shape (docs/behaviour.md, "Loss reductions").
    reduced_result_in_first_element = True

    def __init__(self, args) -> None:
        super().__init__(args)
        compatible = args.overload_index == self.compatible_overload
        self.reduction = legacy_reduction(
            self,
            getattr(args, "size_average", None) if compatible else None,
            getattr(args, "reduce", None) if compatible else None,
            args.reduction,
        )
        self.weighted = (
            compatible and self.elementwise_weight and args.weight is not None
        )
        if self.weighted:
            self.require_shape(
                "weight", args.weight, args.input.shape, "to match `input`"
            )
            self.require_same_dtype(
                "input", {"input": args.input, "weight": args.weight}
            )
            if self.reduction == 0:
                self.require_shape(
                    "out", args.out, args.input.shape, "to match `input`"
                )
            elif args.out.numel == 0:
                raise self.error(
                    "`out` must have at least one element for a reduced result."
                )

    def aten_arguments(self, args) -> tuple[dict, dict]:
        return {"reduction": self.reduction}, {}
