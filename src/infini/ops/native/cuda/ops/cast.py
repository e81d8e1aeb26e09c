"""CUDA-like `cast` (slot 0) in Triton.

Conversions follow the CPU backend (and torch on CPU) where C leaves them
open: float to a narrow integer goes through int32, to `uint8`/`uint32`
through int64 (so -1.0 gives 255), to `uint64` through int64 below 2**63;
float64 and integers reach float16/bfloat16 through float32 (torch builds
those from a float), and bfloat16 rounds to nearest even.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.cast import Cast
from infini.ops.core.dtypes import FLOAT_DTYPES
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import (
    ElementwiseLaunch,
    block_indices,
    element_offsets2,
    from_bfloat16,
    store_as,
)
from infini.ops.runtime.triton import Kernel, require_device

# How a float reaches each integer type: 0 directly, 1 through int32,
# 2 through int64, 3 through int64 below 2**63 (uint64).
_FLOAT_TO_INTEGER_ROUTE = {
    "int8": 1,
    "int16": 1,
    "int32": 0,
    "int64": 0,
    "uint8": 2,
    "uint16": 1,
    "uint32": 2,
    "uint64": 3,
}


@triton.jit
def cast_kernel(
    out,
    input,
    geometry,
    numel,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
    ROUTE: tl.constexpr,
    THROUGH_FLOAT32: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    out_offset, input_offset = element_offsets2(index, geometry, NDIM)
    x = tl.load(input + input_offset, mask=mask)
    if x.dtype == tl.bfloat16:
        x = from_bfloat16(x)
    if ROUTE == 1:
        x = x.to(tl.int32)
    elif ROUTE == 2:
        x = x.to(tl.int64)
    elif ROUTE == 3:
        large = x >= 9.223372036854775808e18
        x = tl.where(large, x.to(tl.uint64), x.to(tl.int64).to(tl.uint64))
    if THROUGH_FLOAT32:
        x = x.to(tl.float32)
    if out.dtype.element_ty == tl.int1:
        tl.store(out + out_offset, x != 0, mask=mask)
    else:
        store_as(out + out_offset, x, mask)


KERNEL = Kernel(cast_kernel)


def cast_constexprs(source: str, destination: str) -> dict:
    """The constexprs of `cast_kernel` for a conversion from `source` to
    `destination` (shared with `copy` and `fill`, which convert through it)."""
    route = 0
    if source in FLOAT_DTYPES:
        route = _FLOAT_TO_INTEGER_ROUTE.get(destination, 0)
    through_float32 = destination in ("float16", "bfloat16") and source != destination
    return {"ROUTE": route, "THROUGH_FLOAT32": through_float32}


@implementation(
    operator="cast",
    devices="cuda_like",
    slot=0,
)
class CudaCast(Cast):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self._launch = ElementwiseLaunch(
            KERNEL,
            self.device,
            args.out,
            (args.input,),
            constexprs=cast_constexprs(args.input.dtype, args.out.dtype),
        )

    def launch(self, stream, input, out) -> None:
        self._launch(stream, out, input)
