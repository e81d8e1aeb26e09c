"""CUDA-like `add` (slot 0): ``out = input + alpha * other`` in Triton."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.add import Add
from infini.ops.core.dtypes import is_float
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
def add_kernel(
    out,
    input,
    other,
    geometry,
    numel,
    alpha,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
    COMPUTE: tl.constexpr,
    ALPHA: tl.constexpr,
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
    # float64 takes `alpha` as a constant: a runtime float scalar is float32.
    if ALPHA is None:
        result = x + alpha * y
    else:
        result = x + ALPHA * y
    store_as(out + out_offset, result, mask)


KERNEL = Kernel(add_kernel)


@implementation(
    operator="add",
    devices="cuda_like",
    slot=0,
)
class CudaAdd(Add):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        dtype = args.out.dtype
        alpha = self.alpha if is_float(dtype) else int(self.alpha)
        wide = dtype == "float64"
        self._launch = ElementwiseLaunch(
            KERNEL,
            self.device,
            args.out,
            (args.input, args.other),
            scalars=(0.0 if wide else alpha,),
            constexprs={
                "COMPUTE": compute_type(dtype),
                "ALPHA": float(alpha) if wide else None,
            },
        )

    def launch(self, stream, input, other, out) -> None:
        self._launch(stream, out, input, other)
