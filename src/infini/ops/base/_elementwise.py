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


def check_gated_halves(operator: Operator, args, dtypes) -> int:
    """Validation of a gated activation ``out = f(input[..., :h]) *
    input[..., h:]`` (`silu_and_mul`, `gelu_tanh_and_mul`): one dtype of
    `dtypes` for both tensors, an even last dimension of `input`, `out` of
    its shape with that dimension halved and writable. Returns ``h``."""
    input, out = args.input, args.out
    operator.require_dtype("input", input, dtypes)
    operator.require_same_dtype("input", {"input": input, "out": out})
    if input.ndim < 1:
        raise operator.error("`input` must have at least 1 dimension, got a scalar.")
    width = input.shape[-1]
    if width % 2:
        raise operator.error(
            f"the last dimension of `input` must be even (two halves), got "
            f"shape {input.shape}."
        )
    half = width // 2
    operator.require_shape(
        "out",
        out,
        input.shape[:-1] + (half,),
        "(half the last dimension of `input`)",
    )
    operator.require_writable("out", out)
    return half
