"""Activation helpers inlined into CPU kernels (the `combine` functions of
`elementwise.binary_kernels`).

They receive values already widened to the compute type (float32 for 16-bit
floats and float32, float64 for float64) and return one of that type.
"""

from __future__ import annotations

import numpy as np

from .jit import helper


@helper
def silu(x):
    """``x * sigmoid(x)`` written as ``x / (1 + exp(-x))``, as torch's CPU
    kernel does; for ``x < -88`` (float32) `exp` overflows to infinity and
    the result is -0, the correctly rounded value. (`np.float32(1)` keeps
    float32 arithmetic in float32; with float64 it widens to float64.)"""
    return x / (np.exp(-x) + np.float32(1))


@helper
def swiglu_combine(input, gate, unused):
    """`swiglu`: ``input * silu(gate)``."""
    return input * silu(gate)


@helper
def silu_and_mul_combine(first, second, unused):
    """`silu_and_mul`: ``silu(first half) * second half``."""
    return silu(first) * second
