"""CUDA-like `silu` (slot 0): ``out = input * sigmoid(input)`` in Triton."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.silu import Silu
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
from infini.ops.native.cuda.special import sigmoid


@triton.jit
def silu_kernel(
    out,
    input,
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
    else:
        out_offset, input_offset = strided_offsets2(index, geometry, NDIM)
    x = load_as(input + input_offset, mask, COMPUTE)
    store_as(out + out_offset, x * sigmoid(x), mask)


KERNEL = Kernel(silu_kernel)


@implementation(
    operator="silu",
    devices="cuda_like",
    slot=0,
)
class CudaSilu(Silu):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self._launch = ElementwiseLaunch(
            KERNEL,
            self.device,
            args.out,
            (args.input,),
            constexprs={"COMPUTE": compute_type(args.out.dtype)},
        )

    def launch(self, stream, input, out) -> None:
        self._launch(stream, out, input)
