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
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from .jit import helper
from .numeric import bits_float32, float32_bits

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
    n = np.floor(clamped * _LOG2E + _HALF32)
    r = clamped - n * _LN2_HIGH
    r = r - n * _LN2_LOW
    z = r * r
    p = (
        (
            (
                ((((_EXP_P0 * r + _EXP_P1) * r + _EXP_P2) * r + _EXP_P3) * r + _EXP_P4)
                * r
            )
            + _EXP_P5
        )
        * z
        + r
        + _ONE32
    )
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


@intrinsic
def _bits_float64(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.uint64), codegen


# `exp` for float64 without a libm call (so that loops vectorise): the same
# scheme as `exp_float32`, with fdlibm's split of ln 2 and a degree-8
# Taylor polynomial (truncation error below 1e-9 relative). Only for float64
# intermediates of float32 or 16-bit results, never for float64 outputs.
_LOG2E64 = 1.4426950408889634
_LN2_HIGH64 = 6.93147180369123816490e-01
_LN2_LOW64 = 1.90821492927058770002e-10


@helper
def _exp_float64(x):
    clamped = min(max(x, -745.0), 709.0)
    n = np.floor(clamped * _LOG2E64 + 0.5)
    r = (clamped - n * _LN2_HIGH64) - n * _LN2_LOW64
    p = 1.0 + r * (
        1.0
        + r
        * (
            1.0 / 2
            + r
            * (
                1.0 / 6
                + r
                * (
                    1.0 / 24
                    + r * (1.0 / 120 + r * (1.0 / 720 + r * (1.0 / 5040 + r / 40320)))
                )
            )
        )
    )
    k = np.int64(n)
    k_high = k >> 1
    k_low = k - k_high
    scale_high = _bits_float64(np.uint64((k_high + 1023) << 52))
    scale_low = _bits_float64(np.uint64((k_low + 1023) << 52))
    return p * scale_high * scale_low


_SQRT1_2 = math.sqrt(0.5)


@helper
def gelu_erf(x):
    """Exact GELU for float64 results, ``x * Phi(x) = 0.5 x erfc(-x /
    sqrt(2))`` (`erfc` rather than ``1 + erf``, which cancels for negative
    `x`) with libm's `erfc`. Returns a float64."""
    value = np.float64(x)
    return 0.5 * value * math.erfc(-value * _SQRT1_2)


# `erfc(a)` for a >= 0 as ``t exp(-a^2 + P(t))``, ``t = 1 / (1 + a / 2)``:
# the Chebyshev fit of Numerical Recipes' `erfcc`, relative error below
# 1.2e-7 for every a >= 0 (no cancellation anywhere).
_ERFC_C0 = -1.26551223
_ERFC_C1 = 1.00002368
_ERFC_C2 = 0.37409196
_ERFC_C3 = 0.09678418
_ERFC_C4 = -0.18628806
_ERFC_C5 = 0.27886807
_ERFC_C6 = -1.13520398
_ERFC_C7 = 1.48851587
_ERFC_C8 = -0.82215223
_ERFC_C9 = 0.17087277


@helper
def gelu_erf_narrow(x):
    """Exact GELU for float32 and 16-bit results: ``x * Phi(x)`` with
    ``Phi(x) = erfc(|x| / sqrt(2)) / 2`` for negative `x` and
    ``1 - erfc(x / sqrt(2)) / 2`` otherwise, evaluated in float64 without
    libm calls (a vectorisable loop); within 2e-7 relative of the exact
    value, under one float32 ulp more after rounding. Returns a float64;
    NaN and infinities behave as in torch (``gelu(-inf)`` is NaN)."""
    value = np.float64(x)
    a = abs(value) * _SQRT1_2
    t = np.divide(1.0, 1.0 + 0.5 * a)
    poly = _ERFC_C0 + t * (
        _ERFC_C1
        + t
        * (
            _ERFC_C2
            + t
            * (
                _ERFC_C3
                + t
                * (
                    _ERFC_C4
                    + t
                    * (
                        _ERFC_C5
                        + t
                        * (_ERFC_C6 + t * (_ERFC_C7 + t * (_ERFC_C8 + t * _ERFC_C9)))
                    )
                )
            )
        )
    )
    half_erfc = 0.5 * t * _exp_float64(poly - a * a)
    # Branch-free choice of `Phi`: `half_erfc` below 0, its complement above.
    positive = np.float64(value >= 0)
    phi = half_erfc + positive * (1.0 - 2.0 * half_erfc)
    return value * phi


@helper
def swiglu_combine(input, gate, unused):
    """`swiglu`: ``input * silu(gate)``."""
    return input * silu(gate)


@helper
def silu_and_mul_combine(first, second, unused):
    """`silu_and_mul`: ``silu(first half) * second half``."""
    return silu(first) * second
