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


# Exact GELU in float32, for float32 and 16-bit results. With
# ``t = 1 / (1 + c |x|)`` and ``u = 1 - t`` (c = 0.375),
#
#     erfc(|x| / sqrt(2)) = t exp(-x^2 / 2 + u Q(u)),
#
# where ``u Q(u) = ln(erfc(|x| / sqrt(2)) exp(x^2 / 2) / t)`` is smooth in u
# (0 at x = 0, tending to ln(c sqrt(2 / pi)) as |x| grows), so one
# polynomial gives `erfc` with a small *relative* error for every |x|, the
# negative tail of GELU included, where ``1 + erf`` would cancel. `Q` is a
# degree-9 weighted least-squares fit (near minimax) over |x| <= 13.5, its
# coefficients rounded to float32 one at a time with the rest refitted after
# each: within 5e-9 of the logarithm. Beyond 13.5, ``Phi(-|x|)`` is below
# float32's normal range, and |x| is clamped there.
_ERFC_SCALE = np.float32(0.375)
_ERFC_Q0 = np.float32(-1.1276912689208984)
_ERFC_Q1 = np.float32(-0.33572885394096375)
_ERFC_Q2 = np.float32(0.1018325686454773)
_ERFC_Q3 = np.float32(0.16055525839328766)
_ERFC_Q4 = np.float32(0.15418165922164917)
_ERFC_Q5 = np.float32(-0.30354630947113037)
_ERFC_Q6 = np.float32(0.5782628655433655)
_ERFC_Q7 = np.float32(-0.9476727247238159)
_ERFC_Q8 = np.float32(0.6969723105430603)
_ERFC_Q9 = np.float32(-0.18380554020404816)
# A line through d(u Q(u))/du (within 0.1 of it): it only scales the
# correction for the rounding of `u`, itself below 2e-7.
_ERFC_SLOPE_U = np.float32(0.006336041260510683)
_ERFC_SLOPE_0 = np.float32(-1.2095224857330322)
_GELU_ERF_CLAMP = np.float32(13.5)
_FLOAT32_MAX = np.float32(3.4028234663852886e38)
_NEGATIVE_ZERO32 = np.float32(-0.0)
# Adding 1.5 * 2^23 rounds a float32 of magnitude below 2^22 to an integer,
# which then sits in the low bits of the sum's significand.
_ROUNDING_SHIFTER = np.float32(12582912.0)
_ROUNDING_SHIFTER_BITS = np.int32(0x4B400000)
# `t exp(r)` is at least 0.1 (t >= 1 / 6.07, exp(r) >= 0.7), so scaling it by
# 2^(k - 1) through its exponent field stays a normal float for k >= -120;
# below that `Phi` is under 4e-38 and is flushed to zero.
_GELU_ERF_LOWEST_K = np.int32(-121)


@helper
def gelu_erf_float32(x):
    """Exact GELU ``x * Phi(x)`` in float32 arithmetic (see the constants
    above), written ``max(x, -0) - |x| Phi(-|x|)`` with
    ``Phi(-|x|) = erfc(|x| / sqrt(2)) / 2`` and one final rounding. The
    roundings that the result's relative error would feel are either exact
    (``x^2`` as two parts, the remainders of `t` and `u` through
    `fma_float32`) or land on quantities below 0.5, so the result is within
    2e-7 relative of the exact value wherever ``Phi(-|x|) >= 4e-38``
    (`tests/test_gelu.py` sweeps it against float64); below that it is
    ``max(x, -0)``, within 1e-36. Branch-free and without libm calls: loops
    over it vectorise. NaN and infinities as in torch (``gelu(-inf)`` is
    NaN)."""
    # `min` keeps a NaN `x` (Python's argument order); +inf becomes finite so
    # that ``inf * 0`` cannot appear below, while -inf stays and gives NaN.
    magnitude = abs(min(x, _FLOAT32_MAX))
    clamped = min(magnitude, _GELU_ERF_CLAMP)
    # -x^2 / 2 = square_high + square_low exactly.
    minus_half = -_HALF32 * clamped
    square_high = minus_half * clamped
    square_low = fma_float32(minus_half, clamped, -square_high)
    d = fma_float32(_ERFC_SCALE, clamped, _ONE32)
    t = np.divide(_ONE32, d)
    u = _ONE32 - t
    # The exact t is t (1 + t_error): the rounding of `d` (`1 - d` is exact
    # for d >= 1) and the division's remainder. The exact u is u + u_error.
    d_error = fma_float32(_ERFC_SCALE, clamped, _ONE32 - d)
    t_error = fma_float32(-d_error, t, fma_float32(-t, d, _ONE32))
    u_error = fma_float32(-t, t_error, -t - (u - _ONE32))
    slope = fma_float32(_ERFC_SLOPE_U, u, _ERFC_SLOPE_0)
    # The small terms of the exponent: ln(1 + t_error) ~ t_error for the
    # factor `t`, and the first-order effect of u_error on u Q(u).
    low = fma_float32(slope, u_error, square_low + t_error)
    # u Q(u) = u Q0 + u^2 rest(u): the rounding of the part that cancels
    # against the reduction below is a single `fma_float32`.
    rest = _ERFC_Q9
    rest = fma_float32(rest, u, _ERFC_Q8)
    rest = fma_float32(rest, u, _ERFC_Q7)
    rest = fma_float32(rest, u, _ERFC_Q6)
    rest = fma_float32(rest, u, _ERFC_Q5)
    rest = fma_float32(rest, u, _ERFC_Q4)
    rest = fma_float32(rest, u, _ERFC_Q3)
    rest = fma_float32(rest, u, _ERFC_Q2)
    rest = fma_float32(rest, u, _ERFC_Q1)
    u_squared = u * u
    # exp of the exponent as in `exp_float32`, with n = round(exponent /
    # ln 2) and the reduction summed from the largest part down
    # (`square_high - n * _LN2_HIGH` is exact).
    estimate = fma_float32(u_squared, rest, fma_float32(u, _ERFC_Q0, square_high))
    shifted = fma_float32(estimate, _LOG2E, _ROUNDING_SHIFTER)
    n = shifted - _ROUNDING_SHIFTER
    r = fma_float32(n, -_LN2_HIGH, square_high)
    r = fma_float32(u, _ERFC_Q0, r)
    r = fma_float32(u_squared, rest, r)
    r = r + low
    r = fma_float32(n, -_LN2_LOW, r)
    expm1 = _EXP_P0
    expm1 = fma_float32(expm1, r, _EXP_P1)
    expm1 = fma_float32(expm1, r, _EXP_P2)
    expm1 = fma_float32(expm1, r, _EXP_P3)
    expm1 = fma_float32(expm1, r, _EXP_P4)
    expm1 = fma_float32(expm1, r, _EXP_P5)
    expm1 = fma_float32(expm1, r * r, r)
    # Phi(-|x|) = t exp(r) 2^(n - 1), with t exp(r) = t + t expm1(r) rounded
    # once and the power of two added to its exponent field.
    k = np.int32(float32_bits(shifted)) - _ROUNDING_SHIFTER_BITS
    scaled = np.int32(float32_bits(fma_float32(t, expm1, t))) + (
        (k - np.int32(1)) << np.int32(23)
    )
    keep = np.int32(0) - np.int32(k > _GELU_ERF_LOWEST_K)
    tail = bits_float32(np.uint32(scaled & keep))
    return fma_float32(-magnitude, tail, max(x, _NEGATIVE_ZERO32))


@helper
def swiglu_combine(input, gate, unused):
    """`swiglu`: ``input * silu(gate)``."""
    return input * silu(gate)


@helper
def silu_and_mul_combine(first, second, unused):
    """`silu_and_mul`: ``silu(first half) * second half``."""
    return silu(first) * second
