"""Activation helpers inlined into CPU kernels (the `transform` functions of
`elementwise.unary_kernels` and the `combine` functions of
`elementwise.binary_kernels`).

They receive values already widened to the compute type (float32 for 16-bit
floats and float32, float64 for float64) and return one of that type, except
where a docstring says otherwise.

`exp` is Numba's `np.exp` for float64 and a polynomial for float32: LLVM has
no vector `exp` without Intel's SVML, and a scalar libm call per element
would make every activation an order of magnitude slower than the memory
traffic it needs. The polynomial keeps the loops vectorisable and is within
two ulps of the correctly rounded result (checked in `tests/test_sigmoid.py`).

Divisions are written `np.divide`: Numba's `/` checks for a zero divisor to
raise `ZeroDivisionError`, and that branch alone stops vectorisation.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types
from numba.extending import overload

from .jit import helper
from .numeric import bits_float32, float32_bits, fma_float32

# `exp` for float32 (the Cephes `expf` scheme): x = n ln2 + r with
# |r| <= ln2 / 2, exp(r) by a degree-7 polynomial, and 2^n applied as two
# exact power-of-two factors so that results in the subnormal range round
# once. Inputs are clamped first (beyond the clamps the result is 0 or inf
# anyway), NaNs pass through.
_LOG2E = np.float32(1.4426950408889634)
_LN2_HIGH = np.float32(0.693359375)  # 9 significant bits: `n * _LN2_HIGH` is exact
_LN2_LOW = np.float32(-2.12194440e-4)
_EXP_MIN = np.float32(-104.0)
_EXP_MAX = np.float32(89.0)
_EXP_P0 = np.float32(1.9875691500e-4)
_EXP_P1 = np.float32(1.3981999507e-3)
_EXP_P2 = np.float32(8.3334519073e-3)
_EXP_P3 = np.float32(4.1665795894e-2)
_EXP_P4 = np.float32(1.6666665459e-1)
_EXP_P5 = np.float32(5.0000001201e-1)
_HALF32 = np.float32(0.5)
_ONE32 = np.float32(1.0)


@helper
def exp_float32(x):
    # No conditional expressions: after Numba inlines them they become
    # branches that keep LLVM from vectorising the caller's loop.
    clamped = min(max(x, _EXP_MIN), _EXP_MAX)
    # Fused multiply-adds: half the instructions of separate ones (Numba
    # does not contract), and each rounds once.
    n = np.floor(fma_float32(clamped, _LOG2E, _HALF32))
    r = fma_float32(n, -_LN2_HIGH, clamped)
    r = fma_float32(n, -_LN2_LOW, r)
    p = fma_float32(_EXP_P0, r, _EXP_P1)
    p = fma_float32(p, r, _EXP_P2)
    p = fma_float32(p, r, _EXP_P3)
    p = fma_float32(p, r, _EXP_P4)
    p = fma_float32(p, r, _EXP_P5)
    p = fma_float32(p, r * r, r) + _ONE32
    k = np.int32(n)
    k_high = k >> 1
    k_low = k - k_high
    scale_high = bits_float32(np.uint32((k_high + 127) << 23))
    scale_low = bits_float32(np.uint32((k_low + 127) << 23))
    result = p * scale_high * scale_low
    # NaN in, NaN out (the clamps replaced it): a branch-free select.
    keep_input = np.uint32(0) - np.uint32(x != x)
    bits = (float32_bits(result) & ~keep_input) | (float32_bits(x) & keep_input)
    return bits_float32(bits)


def exp(x):
    """``e ** x`` in the type of `x` (inside kernels: see the module doc)."""
    return np.exp(x)


@overload(exp, inline="always")
def _exp_overload(x):
    # Inlined at the IR level (a call would stop LLVM vectorising the loop);
    # `def`s rather than lambdas keep Numba's SSA checks quiet.
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def exp_impl(x):
            return exp_float32(x)

        return exp_impl

    def exp_generic(x):
        return np.exp(x)

    return exp_generic


@helper
def sigmoid(x):
    """``1 / (1 + exp(-x))``, computed as ``e / (1 + e)`` with
    ``e = exp(x)`` for negative `x`: `exp` never overflows, so results
    between the float32 overflow of ``exp(-x)`` (x < -88.7) and the
    subnormal range keep full precision (torch's float32 kernel returns 0
    there). The numerator is picked without a branch (``max`` of ``e <= 1``
    and 0 or 1), so loops stay vectorisable; NaN stays NaN. (`np.float32`
    constants keep float32 arithmetic in float32 and widen to float64 with
    float64 arguments.)"""
    e = exp(-abs(x))
    return np.divide(max(e, np.float32(x >= 0)), e + _ONE32)


@helper
def silu(x):
    """``x * sigmoid(x)`` (see `sigmoid`): -0 only where the true result
    underflows."""
    return x * sigmoid(x)


# GELU with the tanh approximation,
# ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, rewritten with
# ``0.5 (1 + tanh(y)) = sigmoid(2 y)``: no cancellation for negative `x`,
# where ``1 + tanh(y)`` would lose every digit. One helper per compute
# type, so that the constants have that type's precision.
_GELU_TANH_SCALE = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_TANH_CUBIC = 0.044715


@helper
def gelu_tanh_float32(x):
    # `y` in float64, rounded once: `sigmoid(y)` for negative `y` is about
    # `exp(y)`, whose relative error is the absolute error of `y`, so a
    # float32 evaluation (a few ulps of `|y|`, up to 88) would cost ~1e-5.
    wide = np.float64(x)
    y = np.float32(_GELU_TANH_SCALE * (wide + _GELU_TANH_CUBIC * (wide * wide * wide)))
    return x * sigmoid(y)


@helper
def gelu_tanh_float64(x):
    y = _GELU_TANH_SCALE * (x + _GELU_TANH_CUBIC * (x * x * x))
    return x * sigmoid(y)


_SQRT1_2 = math.sqrt(0.5)


@helper
def gelu_erf(x):
    """Exact GELU for float64 results, ``x * Phi(x) = 0.5 x erfc(-x /
    sqrt(2))`` (`erfc` rather than ``1 + erf``, which cancels for negative
    `x`) with libm's `erfc`. Returns a float64."""
    value = np.float64(x)
    return 0.5 * value * math.erfc(-value * _SQRT1_2)


# Exact GELU in float32 arithmetic, from
#
#     Phi(-|x|) = erfc(|x| / sqrt(2)) / 2 = s N(|x|) / D(|x|) exp(-x^2 / 2),
#
# where ``s N / D`` stands for ``erfcx(|x| / sqrt(2)) / 2``, a smooth
# function that falls like ``1 / |x|``: a rational function gives it with a
# small *relative* error for every |x|, the negative tail of GELU included,
# where ``1 + erf`` would cancel (torch's float32 kernel is 2e-4 off at
# x = -3 and returns 0 below -5.5). The coefficients are minimax fits of
# that relative error over |x| <= 13 (where ``Phi(-|x|)`` leaves float32's
# normal range), rounded to float32 one at a time with the rest refitted.
# All are positive, so Horner's scheme adds no cancellation; `N` and `D` are
# monic (their first steps are additions) and the scale `s` goes into the
# polynomial of ``exp(-y / 2)``, the part of ``exp(-x^2 / 2)`` left after
# taking out a power of two, ``2^n``, n = round(-x^2 / (2 ln 2)), so that
# y = x^2 + 2 n ln 2 and |y| <= ln 2.
#
# Two precisions. For float32 results, degrees 4 and 5 (within 6e-8), a
# degree-5 `exp` (within 1.1e-7) and a reduction that keeps the rounding of
# x^2 out of `y`: the result is within 5e-7 relative. 16-bit results keep 8
# or 11 bits of it, so there degrees 3 and 4 (within 1.1e-6), a degree-4
# `exp` (within 2.8e-6) and the rounded x^2 (4e-6 at most) do: within 8e-6
# relative, 1/30 of a float16 ulp, for a quarter fewer operations.
_ERFC_N0 = np.float32(127.95389556884766)
_ERFC_N1 = np.float32(110.79913330078125)
_ERFC_N2 = np.float32(45.870513916015625)
_ERFC_N3 = np.float32(10.050479888916016)
_ERFC_D0 = np.float32(102.09415435791016)
_ERFC_D1 = np.float32(169.86573791503906)
_ERFC_D2 = np.float32(121.08625030517578)
_ERFC_D3 = np.float32(46.85285186767578)
_ERFC_D4 = np.float32(10.051494598388672)
_ERFC_SHORT_N0 = np.float32(24.549264907836914)
_ERFC_SHORT_N1 = np.float32(18.92546844482422)
_ERFC_SHORT_N2 = np.float32(6.54295539855957)
_ERFC_SHORT_D0 = np.float32(19.587827682495117)
_ERFC_SHORT_D1 = np.float32(30.7285099029541)
_ERFC_SHORT_D2 = np.float32(19.951189041137695)
_ERFC_SHORT_D3 = np.float32(6.54258394241333)
# ``s exp(-y / 2) = s + y Q(y)``.
_EXP_HALF_S = np.float32(0.39894899725914)
_EXP_HALF_Q1 = np.float32(-0.19947440922260284)
_EXP_HALF_Q2 = np.float32(0.04986773803830147)
_EXP_HALF_Q3 = np.float32(-0.008312109857797623)
_EXP_HALF_Q4 = np.float32(0.0010448172688484192)
_EXP_HALF_Q5 = np.float32(-0.00010316995030734688)
_EXP_HALF_SHORT_Q1 = np.float32(-0.19946788251399994)
_EXP_HALF_SHORT_Q2 = np.float32(0.04987163469195366)
_EXP_HALF_SHORT_Q3 = np.float32(-0.008371686562895775)
_EXP_HALF_SHORT_Q4 = np.float32(0.0010351099772378802)
_MINUS_HALF_LOG2E = np.float32(-0.5 * 1.4426950408889634)
# 2 ln 2, in one part and in two as `_LN2_HIGH` and `_LN2_LOW`.
_LN2_TWICE = np.float32(2.0 * 0.6931471805599453)
_LN2_HIGH_TWICE = np.float32(2.0 * 0.693359375)
_LN2_LOW_TWICE = np.float32(2.0 * -2.12194440e-4)
_FLOAT32_MAX = np.float32(3.4028234663852886e38)
_NEGATIVE_ZERO32 = np.float32(-0.0)
# Adding 1.5 * 2^23 rounds a float32 of magnitude below 2^22 to an integer,
# which then sits in the low bits of the sum's significand: shifted left by
# 23 (the shifter's own bits shift out), that integer is a power of two's
# exponent field.
_ROUNDING_SHIFTER = np.float32(12582912.0)
# ``s N / D exp(-y / 2)`` is at least 0.02 (2^-6) for |x| <= 13, so scaling
# it by 2^n through its exponent field stays a normal float for n >= -120;
# below that ``Phi`` is under 3e-38 and is flushed to zero.
_GELU_ERF_LOWEST_N = np.float32(-120.5)


@helper
def _gelu_erf_magnitude(x):
    """``|x|``, with +inf made finite so that ``inf * 0`` cannot appear in
    `_gelu_erf_result`, while -inf stays and gives NaN there; NaN stays
    (`min` keeps its first argument when unordered). No clamp: wherever
    ``|x|`` is too large for the polynomials (overflows, NaNs), `n` is far
    below `_GELU_ERF_LOWEST_N` and the tail is flushed."""
    return abs(min(x, _FLOAT32_MAX))


@helper
def _gelu_erf_result(x, magnitude, quotient, shifted, n):
    """``max(x, -0) - |x| Phi(-|x|)`` rounded once, with ``Phi(-|x|) =
    quotient 2^n``: the power of two added to the quotient's exponent
    field, or the whole flushed to zero (see `_GELU_ERF_LOWEST_N`)."""
    scaled = float32_bits(quotient) + (float32_bits(shifted) << np.uint32(23))
    keep = np.uint32(0) - np.uint32(n > _GELU_ERF_LOWEST_N)
    tail = bits_float32(scaled & keep)
    return fma_float32(-magnitude, tail, max(x, _NEGATIVE_ZERO32))


@helper
def gelu_erf_float32(x):
    """Exact GELU ``x * Phi(x)`` for float32 results (see the constants
    above): within 5e-7 relative wherever ``Phi(-|x|) >= 3e-38``
    (`tests/test_gelu.py` sweeps it against float64); below that it is
    ``max(x, -0)``, within 4e-37. Branch-free and without libm calls: loops
    over it vectorise. NaN and infinities as in torch (``gelu(-inf)`` is
    NaN)."""
    magnitude = _gelu_erf_magnitude(x)
    square = magnitude * magnitude
    shifted = fma_float32(square, _MINUS_HALF_LOG2E, _ROUNDING_SHIFTER)
    n = shifted - _ROUNDING_SHIFTER
    # y = x^2 + 2 n ln 2: `n * _LN2_HIGH_TWICE` is exact, and `fma_float32`
    # adds it to the exact square, rounding only the small difference (a
    # rounded x^2, up to 170, would be off by 4e-6).
    y = fma_float32(magnitude, magnitude, n * _LN2_HIGH_TWICE)
    y = fma_float32(n, _LN2_LOW_TWICE, y)
    q = fma_float32(_EXP_HALF_Q5, y, _EXP_HALF_Q4)
    q = fma_float32(q, y, _EXP_HALF_Q3)
    q = fma_float32(q, y, _EXP_HALF_Q2)
    q = fma_float32(q, y, _EXP_HALF_Q1)
    scaled_exp = fma_float32(q, y, _EXP_HALF_S)
    numerator = magnitude + _ERFC_N3
    numerator = fma_float32(numerator, magnitude, _ERFC_N2)
    numerator = fma_float32(numerator, magnitude, _ERFC_N1)
    numerator = fma_float32(numerator, magnitude, _ERFC_N0)
    denominator = magnitude + _ERFC_D4
    denominator = fma_float32(denominator, magnitude, _ERFC_D3)
    denominator = fma_float32(denominator, magnitude, _ERFC_D2)
    denominator = fma_float32(denominator, magnitude, _ERFC_D1)
    denominator = fma_float32(denominator, magnitude, _ERFC_D0)
    quotient = np.divide(numerator * scaled_exp, denominator)
    return _gelu_erf_result(x, magnitude, quotient, shifted, n)


@helper
def gelu_erf_float32_short(x):
    """`gelu_erf_float32` for 16-bit results: within 8e-6 relative, so that
    rounded to float16 or bfloat16 it is the correctly rounded GELU or a
    neighbour (`tests/test_gelu.py` checks every input)."""
    magnitude = _gelu_erf_magnitude(x)
    square = magnitude * magnitude
    shifted = fma_float32(square, _MINUS_HALF_LOG2E, _ROUNDING_SHIFTER)
    n = shifted - _ROUNDING_SHIFTER
    y = fma_float32(n, _LN2_TWICE, square)
    q = fma_float32(_EXP_HALF_SHORT_Q4, y, _EXP_HALF_SHORT_Q3)
    q = fma_float32(q, y, _EXP_HALF_SHORT_Q2)
    q = fma_float32(q, y, _EXP_HALF_SHORT_Q1)
    scaled_exp = fma_float32(q, y, _EXP_HALF_S)
    numerator = magnitude + _ERFC_SHORT_N2
    numerator = fma_float32(numerator, magnitude, _ERFC_SHORT_N1)
    numerator = fma_float32(numerator, magnitude, _ERFC_SHORT_N0)
    denominator = magnitude + _ERFC_SHORT_D3
    denominator = fma_float32(denominator, magnitude, _ERFC_SHORT_D2)
    denominator = fma_float32(denominator, magnitude, _ERFC_SHORT_D1)
    denominator = fma_float32(denominator, magnitude, _ERFC_SHORT_D0)
    quotient = np.divide(numerator * scaled_exp, denominator)
    return _gelu_erf_result(x, magnitude, quotient, shifted, n)


@helper
def swiglu_combine(input, gate, unused):
    """`swiglu`: ``input * silu(gate)``."""
    return input * silu(gate)


@helper
def silu_and_mul_combine(first, second, unused):
    """`silu_and_mul`: ``silu(first half) * second half``."""
    return silu(first) * second


@helper
def gelu_tanh_and_mul_combine_float32(first, second, unused):
    """`gelu_tanh_and_mul` in float32: ``gelu_tanh(first half) * second
    half``."""
    return gelu_tanh_float32(first) * second


@helper
def gelu_tanh_and_mul_combine_float64(first, second, unused):
    """`gelu_tanh_and_mul` in float64."""
    return gelu_tanh_float64(first) * second
