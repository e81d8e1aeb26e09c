"""`elu`: the exponential linear unit."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class Elu(Operator):
    """``out = scale * (input if input > 0 else alpha * (exp(input *
    input_scale) - 1))``, as `torch.nn.functional.elu` (``scale =
    input_scale = 1``, the short overload) and ATen's `elu`. Served by ATen
    (slot 8)."""

    name = "elu"
    trace_name = "Elu"
    overloads = (
        "input: Tensor, alpha: float, scale: float, input_scale: float, out: Tensor!",
        "input: Tensor, alpha: float, out: Tensor!",
    )
    defaults = {"scale": 1.0, "input_scale": 1.0}
