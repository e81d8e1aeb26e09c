"""CUDA-like `mul` (slot 0): ``out = input * other`` in Triton."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.mul import Mul
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import (
    ElementwiseLaunch,
    block_indices,
    compute_type,
    load_as,
    store_as,
    strided_offsets3,
)
from infini.ops.native.cuda.runtime import Kernel, require_device


@triton.jit
def mul_kernel(
    out,
    input,
    other,
    geometry,
    numel,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
    COMPUTE: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    if NDIM == 0:
        out_offset = index
        input_offset = index
        other_offset = index
    else:
        out_offset, input_offset, other_offset = strided_offsets3(index, geometry, NDIM)
    x = load_as(input + input_offset, mask, COMPUTE)
    y = load_as(other + other_offset, mask, COMPUTE)
    store_as(out + out_offset, x * y, mask)


KERNEL = Kernel(mul_kernel)


@implementation(
    operator="mul",
    devices="cuda_like",
    slot=0,
)
class CudaMul(Mul):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self._launch = ElementwiseLaunch(
            KERNEL,
            self.device,
            args.out,
            (args.input, args.other),
            constexprs={"COMPUTE": compute_type(args.out.dtype)},
        )

    def launch(self, stream, input, other, out) -> None:
        self._launch(stream, out, input, other)
