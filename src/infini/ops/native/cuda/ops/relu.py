"""CUDA-like `relu` (slot 0) in Triton."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.relu import Relu
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.elementwise import (
    ElementwiseLaunch,
    block_indices,
    strided_offsets2,
)
from infini.ops.native.cuda.runtime import Kernel, require_device


@triton.jit
def relu_kernel(
    out,
    input,
    geometry,
    numel,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    if NDIM == 0:
        out_offset = index
        input_offset = index
    else:
        out_offset, input_offset = strided_offsets2(index, geometry, NDIM)
    x = tl.load(input + input_offset, mask=mask)
    # A select, not arithmetic: `-0.0` and NaNs (payloads included) pass
    # through bit for bit, as in torch. 16-bit floats are tested on their
    # bits (sign set, magnitude in (0, inf]), exact on GPUs and under the
    # interpreter alike.
    if x.dtype == tl.bfloat16:
        bits = x.to(tl.int16, bitcast=True)
        magnitude = bits & 0x7FFF
        negative = (bits < 0) & (magnitude != 0) & (magnitude <= 0x7F80)
    elif x.dtype == tl.float16:
        bits = x.to(tl.int16, bitcast=True)
        magnitude = bits & 0x7FFF
        negative = (bits < 0) & (magnitude != 0) & (magnitude <= 0x7C00)
    else:
        negative = x < 0
    tl.store(out + out_offset, tl.where(negative, tl.zeros_like(x), x), mask=mask)


KERNEL = Kernel(relu_kernel)


@implementation(
    operator="relu",
    devices="cuda_like",
    slot=0,
)
class CudaRelu(Relu):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self._launch = ElementwiseLaunch(KERNEL, self.device, args.out, (args.input,))

    def launch(self, stream, input, out) -> None:
        self._launch(stream, out, input)
