"""`@triton.jit` helpers the NineToothed applications call.

NineToothed copies every `@triton.jit` function an application's module
holds into the generated source, so these are compiled with each kernel.
They keep the arithmetic rules of the other Triton kernels of InfiniOps:
16-bit floats are upcast to float32 before any arithmetic (bfloat16
arithmetic is wrong under Triton's interpreter) and results are rounded once
when stored, bfloat16 to nearest even.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def upcast(value):
    """`value` in its compute type: float32 for 16-bit and 32-bit floats,
    float64 for float64, integers unchanged. bfloat16 moves its bits into
    the upper half of a float32, exactly (the interpreter's `.to` mishandles
    subnormals)."""
    if value.dtype == tl.bfloat16:
        bits = value.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
        return bits.to(tl.float32, bitcast=True)
    elif value.dtype == tl.float16:
        return value.to(tl.float32)
    else:
        return value


@triton.jit
def downcast(value, element):
    """`value` converted to the element type `element` of an output,
    bfloat16 rounded to nearest even from float32 (NaN to 0x7FC0, as torch
    does; the interpreter would truncate)."""
    if element == tl.bfloat16:
        bits = value.to(tl.float32).to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        upper = tl.where(value != value, 0x7FC0, rounded)
        return upper.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return value.to(element)


@triton.jit
def store_rounded(pointer, value, mask):
    """Stores `value` through `pointer`, rounded by `downcast`."""
    tl.store(pointer, downcast(value, pointer.dtype.element_ty), mask=mask)


@triton.jit
def dot_operand(value, wide):
    """An operand of `tl.dot`: `upcast` when `wide` (a constexpr; under
    Triton's interpreter, whose 16-bit arithmetic is unreliable), else as
    loaded (16-bit products are exact in the float32 accumulator)."""
    if wide:
        return upcast(value)
    else:
        return value


@triton.jit
def silu(x):
    """``x / (1 + exp(-x))`` in float64, rounded once by the store: full
    precision down to the subnormal range (float32 `exp(-x)` would lose the
    tail below -87), and NaN for -inf as torch gives."""
    wide = x.to(tl.float64)
    return wide / (1.0 + tl.exp(-wide))


@triton.jit
def erfc_wide(z):
    """``erfc(z)`` in float64: ``1 - erf(z)`` below 2 (no cancellation for
    negative `z`, at most two digits lost near 2), above it ``exp(-z^2) /
    sqrt(pi)`` times Laplace's continued fraction, evaluated backwards over
    60 terms, with ``z^2`` split into its rounded value and the rounding
    error (an `fma`), so that the rounding of the square does not enter the
    exponent. `z` is clamped to 40 there, where `erfc` is 0 in float64
    already (and the split stays finite). Helpers are copied into each
    generated source, so the constants are literals."""
    z = z.to(tl.float64)
    large = tl.minimum(tl.maximum(z, 2.0), 40.0)
    tail = tl.zeros_like(large)
    for step in tl.static_range(60):
        tail = ((60 - step) * 0.5) / (large + tail)
    square = large * large
    error = tl.fma(large, large, -square)
    fraction = 0.5641895835477563 / (large + tail)
    above = tl.exp(-square) * tl.exp(-error) * fraction
    return tl.where(z < 2.0, 1.0 - tl.math.erf(z), above)


@triton.jit
def gelu_erf(x):
    """``0.5 x erfc(-x / sqrt(2))`` in float64."""
    wide = x.to(tl.float64)
    return 0.5 * wide * erfc_wide(-wide * 0.7071067811865476)


@triton.jit
def gelu_tanh(x):
    """``0.5 x (1 + tanh(y))`` as ``x / (1 + exp(-2 y))`` in float64, with
    ``y = sqrt(2 / pi) (x + 0.044715 x^3)`` (no cancellation for negative
    `x`)."""
    wide = x.to(tl.float64)
    twice = 1.5957691216057308 * (wide + 0.044715 * (wide * wide * wide))
    return wide / (1.0 + tl.exp(-twice))
