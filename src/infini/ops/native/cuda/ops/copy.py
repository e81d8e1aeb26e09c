"""CUDA-like `copy` (slot 0): ``out.copy_(src)`` in Triton, `src` broadcast
to `out`.

The same dtype is a bit copy (NaN payloads kept); another dtype goes through
`cast`'s kernel and conversions.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.copy import Copy
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import (
    ElementwiseLaunch,
    bits_pointer,
    block_indices,
    element_offsets2,
)
from infini.ops.native.cuda.ops.cast import KERNEL as CAST_KERNEL
from infini.ops.native.cuda.ops.cast import cast_constexprs
from infini.ops.runtime.triton import Kernel, require_device


@triton.jit
def copy_kernel(
    out,
    src,
    geometry,
    numel,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    out_offset, src_offset = element_offsets2(index, geometry, NDIM)
    value = tl.load(bits_pointer(src) + src_offset, mask=mask)
    tl.store(bits_pointer(out) + out_offset, value, mask=mask)


KERNEL = Kernel(copy_kernel)


@implementation(
    operator="copy",
    devices="cuda_like",
    slot=0,
)
class CudaCopy(Copy):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        src, out = args.src, args.out
        if src.dtype == out.dtype:
            kernel, constexprs = KERNEL, {}
        else:
            kernel, constexprs = CAST_KERNEL, cast_constexprs(src.dtype, out.dtype)
        self._launch = ElementwiseLaunch(
            kernel, self.device, out, (src,), constexprs=constexprs
        )

    def launch(self, stream, src, out) -> None:
        self._launch(stream, out, src)
