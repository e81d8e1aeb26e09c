"""CUDA-like `silu_and_mul` (slot 0) in Triton:
``out = silu(input[..., :h]) * input[..., h:]``.

The two halves of `input` are one operand of the elementwise plan (they
share strides); the second half is `second` elements further on.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.native.cuda.elementwise import (
    ElementwiseLaunch,
    block_indices,
    compute_type,
    load_as,
    store_as,
    strided_offsets2,
)
from infini.ops.native.cuda.runtime import Kernel, require_device


@triton.jit
def silu_and_mul_kernel(
    out,
    input,
    geometry,
    numel,
    second,
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
    y = load_as(input + input_offset + second, mask, COMPUTE)
    store_as(out + out_offset, (x / (1.0 + tl.exp(-x))) * y, mask)


KERNEL = Kernel(silu_and_mul_kernel)


@implementation(
    operator="silu_and_mul",
    devices="cuda_like",
    slot=0,
)
class CudaSiluAndMul(SiluAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, out = args.input, args.out
        first_half = TensorMeta(
            out.shape, input.strides, input.dtype, input.device, input.torch_dtype
        )
        self._launch = ElementwiseLaunch(
            KERNEL,
            self.device,
            out,
            (first_half,),
            scalars=(self.half * input.strides[-1],),
            constexprs={"COMPUTE": compute_type(out.dtype)},
            guard_inputs=(input,),
        )

    def launch(self, stream, input, out) -> None:
        self._launch(stream, out, input)
