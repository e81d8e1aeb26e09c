"""Validation shared by unary elementwise bases (activations, copies)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

# The dtypes of floating-point activations (`silu`, `sigmoid`, `gelu`, ...).
ACTIVATION_DTYPES = ("float32", "float64", "float16", "bfloat16")


def check_same_shape_and_dtype(operator: Operator, args, dtypes=None) -> None:
    """`input` and `out` have one shape and one dtype (from `dtypes` when
    given); `out` does not broadcast. `input` may have any strides,
    stride-0 dimensions included."""
    input, out = args.input, args.out
    if dtypes is not None:
        operator.require_dtype("input", input, dtypes)
    operator.require_same_dtype("input", {"input": input, "out": out})
    operator.require_shape("out", out, input.shape, "to match `input`")
    operator.require_writable("out", out)


def check_broadcasts_to(operator: Operator, input_name: str, input, out) -> None:
    """`input` broadcasts to `out`'s shape (as `Tensor.expand_as` allows:
    missing leading dimensions, size-1 dimensions); `out` does not
    broadcast."""
    shape, target = tuple(input.shape), tuple(out.shape)
    fits = len(shape) <= len(target) and all(
        size == 1 or size == wanted
        for size, wanted in zip(reversed(shape), reversed(target), strict=False)
    )
    if not fits:
        raise operator.error(
            f"`{input_name}` of shape {shape} does not broadcast to the shape of "
            f"`out` {target}."
        )
    operator.require_writable("out", out)


def check_approximate(operator: Operator, approximate: str) -> str:
    """GELU's `approximate`: ``"none"`` (erf) or ``"tanh"``."""
    if approximate not in ("none", "tanh"):
        raise operator.error(
            f'`approximate` must be "none" or "tanh", got {approximate!r}.'
        )
    return approximate
