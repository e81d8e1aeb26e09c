"""CUDA-like `swiglu` (slot 0): ``out = input * silu(gate)`` in Triton."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.swiglu import Swiglu
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
def swiglu_kernel(
    out,
    input,
    gate,
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
        gate_offset = index
    else:
        out_offset, input_offset, gate_offset = strided_offsets3(index, geometry, NDIM)
    x = load_as(input + input_offset, mask, COMPUTE)
    g = load_as(gate + gate_offset, mask, COMPUTE)
    store_as(out + out_offset, x * (g / (1.0 + tl.exp(-g))), mask)


KERNEL = Kernel(swiglu_kernel)


@implementation(
    operator="swiglu",
    devices="cuda_like",
    slot=0,
)
class CudaSwiglu(Swiglu):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self._launch = ElementwiseLaunch(
            KERNEL,
            self.device,
            args.out,
            (args.input, args.gate),
            constexprs={"COMPUTE": compute_type(args.out.dtype)},
        )

    def launch(self, stream, input, gate, out) -> None:
        self._launch(stream, out, input, gate)
