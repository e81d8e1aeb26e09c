"""`special_round`: `torch.special.round`."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class SpecialRound(Operator):
    """``out = torch.special.round(input, decimals=decimals)``: round half to
    even, at `decimals` decimal places (negative: to the left of the point);
    the short overload rounds to integers (``decimals = 0``). Served by
    PyTorch's ATen kernel (slot 8)."""

    name = "special_round"
    trace_name = "special::Round"
    overloads = (
        "input: Tensor, decimals: int, out: Tensor!",
        "input: Tensor, out: Tensor!",
    )
    defaults = {"decimals": 0}
