"""CUDA-like `gelu` (slot 0) in Triton.

- ``approximate="tanh"``: ``0.5 x (1 + tanh(y))`` computed as
  ``x * sigmoid(2 y)`` with ``y = sqrt(2 / pi) (x + 0.044715 x^3)`` (no
  cancellation for negative `x`), in float32 (float64 for float64).
- ``approximate="none"``: ``0.5 x erfc(-x / sqrt(2))`` in float64 for every
  dtype, as the CPU backend computes it (``1 + erf`` would lose every digit
  for negative `x`); the continued fraction of `erfc_float64` is cut where
  the result type no longer sees the difference.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from infini.ops.base.gelu import Gelu
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import (
    ElementwiseLaunch,
    block_indices,
    compute_type,
    load_as,
    store_as,
    strided_offsets2,
)
from infini.ops.native.cuda.runtime import Kernel, require_device
from infini.ops.native.cuda.special import erfc_float64, sigmoid

TANH_SCALE = tl.constexpr(2.0 * math.sqrt(2.0 / math.pi))
TANH_CUBIC = tl.constexpr(0.044715)
SQRT1_2 = tl.constexpr(math.sqrt(0.5))


@triton.jit
def gelu_kernel(
    out,
    input,
    geometry,
    numel,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
    COMPUTE: tl.constexpr,
    TANH: tl.constexpr,
    TERMS: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    if NDIM == 0:
        out_offset = index
        input_offset = index
    else:
        out_offset, input_offset = strided_offsets2(index, geometry, NDIM)
    x = load_as(input + input_offset, mask, COMPUTE)
    if TANH:
        # `y` in float64, rounded once: `sigmoid(y)` for negative `y` is about
        # `exp(y)`, whose relative error is the absolute error of `y` (a
        # float32 evaluation would cost up to ~1e-5 near y = -88).
        wide = x.to(tl.float64)
        y = TANH_SCALE * (wide + TANH_CUBIC * (wide * wide * wide))
        result = x * sigmoid(y.to(x.dtype))
    else:
        result = 0.5 * x * erfc_float64(-x * SQRT1_2, TERMS)
    store_as(out + out_offset, result, mask)


KERNEL = Kernel(gelu_kernel)


@implementation(
    operator="gelu",
    devices="cuda_like",
    slot=0,
)
class CudaGelu(Gelu):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        dtype = args.out.dtype
        tanh = self.approximate == "tanh"
        self._launch = ElementwiseLaunch(
            KERNEL,
            self.device,
            args.out,
            (args.input,),
            constexprs={
                "COMPUTE": compute_type(dtype) if tanh else tl.float64,
                "TANH": tanh,
                # Continued-fraction terms: float64 precision, or 1e-9.
                "TERMS": 40 if dtype == "float64" else 20,
            },
        )

    def launch(self, stream, input, out) -> None:
        self._launch(stream, out, input)
