"""Validation shared by elementwise bases."""

from __future__ import annotations

from infini.ops.core.geometry import broadcast_shape
from infini.ops.core.operator import Operator


def check_broadcast_to_output(
    operator: Operator, out_name: str, out, inputs: dict
) -> None:
    """Every input must broadcast to the output's shape, and the output must
    be exactly the broadcast shape."""
    shapes = [meta.shape for meta in inputs.values()]
    result = broadcast_shape(*shapes)
    if result is None:
        described = ", ".join(f"`{name}` {meta.shape}" for name, meta in inputs.items())
        raise operator.error(f"the inputs do not broadcast together: {described}.")
    if result != tuple(out.shape):
        raise operator.error(
            f"`{out_name}` must have the broadcast shape of the inputs {result}, "
            f"got {tuple(out.shape)}."
        )
    operator.require_writable(out_name, out)
