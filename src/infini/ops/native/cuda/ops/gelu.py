"""CUDA-like `gelu` (slot 0): the unary elementwise template with one of
three GELU functions.

- ``approximate="tanh"``: ``0.5 x (1 + tanh(y))`` computed as
  ``x * sigmoid(2 y)`` with ``y = sqrt(2 / pi) (x + 0.044715 x^3)`` (no
  cancellation for negative `x`), in float32 (float64 for float64).
- ``approximate="none"``: ``0.5 x erfc(-x / sqrt(2))`` in float64 for every
  dtype, as the CPU backend computes it (``1 + erf`` would lose every digit
  for negative `x`); the continued fraction of `erfc_float64` is cut where
  the result type no longer sees the difference (40 terms for float64, 20
  reach 1e-9 for the others).
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from infini.ops.base.gelu import Gelu
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import UnaryElementwise
from infini.ops.native.cuda.special import erfc_float64, sigmoid

TANH_SCALE = tl.constexpr(2.0 * math.sqrt(2.0 / math.pi))
TANH_CUBIC = tl.constexpr(0.044715)
SQRT1_2 = tl.constexpr(math.sqrt(0.5))


@triton.jit
def gelu_tanh(x):
    # `y` in float64, rounded once: `sigmoid(y)` for negative `y` is about
    # `exp(y)`, whose relative error is the absolute error of `y` (a float32
    # evaluation would cost up to ~1e-5 near y = -88).
    wide = x.to(tl.float64)
    y = TANH_SCALE * (wide + TANH_CUBIC * (wide * wide * wide))
    return x * sigmoid(y.to(x.dtype))


@triton.jit
def gelu_erf(x):
    return 0.5 * x * erfc_float64(-x * SQRT1_2, 20)


@triton.jit
def gelu_erf_float64(x):
    return 0.5 * x * erfc_float64(-x * SQRT1_2, 40)


@implementation(operator="gelu", devices="cuda_like", slot=0)
class CudaGelu(Gelu):
    def __init__(self, args) -> None:
        super().__init__(args)
        out = args.out
        if self.approximate == "tanh":
            function, compute = gelu_tanh, None
        else:
            wide = out.dtype == "float64"
            function, compute = gelu_erf_float64 if wide else gelu_erf, tl.float64
        self.launch = UnaryElementwise(self, out, args.input, function, compute=compute)
