"""Accurate elementary functions for the CUDA-like Triton kernels.

They give the same results on GPUs and under Triton's interpreter (the CPU
test mode), because they are built from exactly rounded operations only:

- `exp_float32`: the Cephes `expf` scheme. ``x = n ln2 + r`` with
  ``|r| <= ln2 / 2``, ``exp(r)`` by a degree-7 polynomial, and ``2^n``
  applied as two exact power-of-two factors (so results in the subnormal
  range round once). Within two ulps of the correctly rounded result; GPU
  `tl.exp` (``ex2.approx`` of ``x * log2(e)``) loses up to ``|x| * 2^-24``
  relative in the product, several ulps for large ``|x|``.
- `exp`: `exp_float32` for float32, `tl.exp` (libdevice) for float64.
- `sigmoid`: ``e / (1 + e)`` with ``e = exp(-|x|)``, which never overflows.
- `erfc_float64`: the complementary error function in float64, ``1 -
  erf(z)`` below 2 (where no digit cancels) and Laplace's continued
  fraction for ``erfc(z) exp(z^2)`` above (libdevice's `erfc` has no
  interpreter counterpart).
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

# Cephes `expf` constants: `LN2_HIGH` has 9 significant bits, so that
# `n * LN2_HIGH` is exact.
LOG2E = tl.constexpr(1.4426950408889634)
LN2_HIGH = tl.constexpr(0.693359375)
LN2_LOW = tl.constexpr(-2.12194440e-4)
EXP_MIN = tl.constexpr(-104.0)
EXP_MAX = tl.constexpr(89.0)
EXP_P0 = tl.constexpr(1.9875691500e-4)
EXP_P1 = tl.constexpr(1.3981999507e-3)
EXP_P2 = tl.constexpr(8.3334519073e-3)
EXP_P3 = tl.constexpr(4.1665795894e-2)
EXP_P4 = tl.constexpr(1.6666665459e-1)
EXP_P5 = tl.constexpr(5.0000001201e-1)

INV_SQRT_PI = tl.constexpr(1.0 / math.sqrt(math.pi))


@triton.jit
def exp_float32(x):
    """``e ** x`` for float32 `x` (see the module doc); NaN stays NaN."""
    clamped = tl.minimum(tl.maximum(x, EXP_MIN), EXP_MAX)
    n = tl.floor(clamped * LOG2E + 0.5)
    r = clamped - n * LN2_HIGH
    r = r - n * LN2_LOW
    z = r * r
    p = ((((EXP_P0 * r + EXP_P1) * r + EXP_P2) * r + EXP_P3) * r + EXP_P4) * r
    p = (p + EXP_P5) * z + r + 1.0
    k = n.to(tl.int32)
    k_high = k >> 1
    k_low = k - k_high
    scale_high = ((k_high + 127) << 23).to(tl.float32, bitcast=True)
    scale_low = ((k_low + 127) << 23).to(tl.float32, bitcast=True)
    result = p * scale_high * scale_low
    return tl.where(x != x, x, result)


@triton.jit
def exp(x):
    """``e ** x`` in the type of `x` (float32 or float64)."""
    if x.dtype == tl.float64:
        return tl.exp(x)
    else:
        return exp_float32(x)


@triton.jit
def sigmoid(x):
    """``1 / (1 + exp(-x))`` as ``e / (1 + e)`` with ``e = exp(-|x|)`` (the
    numerator is 1 for ``x >= 0``): full precision down to the subnormal
    range, NaN stays NaN."""
    e = exp(-tl.abs(x))
    numerator = tl.where(x >= 0, 1.0, e).to(e.dtype)
    return tl.where(x != x, x, numerator / (e + 1.0))


@triton.jit
def erfc_float64(z, TERMS: tl.constexpr):
    """``erfc(z)`` for float64 `z`: ``1 - erf(z)`` below 2 and, above, ``exp(-z^2)
    / sqrt(pi)`` times Laplace's continued fraction
    ``1 / (z + (1/2) / (z + (2/2) / (z + ...)))`` cut after `TERMS` terms
    (40 reach float64 precision at 2, 20 reach 1e-9)."""
    # Above 40 erfc is below float64's range (0); the clamp also keeps the
    # split square's error term finite (for z near 1e9 it reaches 1e3, and
    # exp(-square) * exp(-error) would be 0 * inf).
    large = tl.minimum(tl.maximum(z, 2.0), 40.0)
    tail = tl.zeros_like(z)
    for step in tl.static_range(TERMS):
        tail = ((TERMS - step) * 0.5) / (large + tail)
    fraction = INV_SQRT_PI / (large + tail)
    # exp(-z^2) with z^2 split exactly into a rounded square and its error,
    # so that the rounding of z^2 does not enter the exponent.
    square = large * large
    high = large.to(tl.float32).to(tl.float64)
    low = large - high
    error = (high * high - square) + 2.0 * high * low + low * low
    continued = tl.exp(-square) * tl.exp(-error) * fraction
    small = 1.0 - tl.math.erf(tl.minimum(z, 2.0))
    return tl.where(z < 2.0, small, continued)
