"""CUDA-like `fill` (slot 0) in Triton: every element of `out` gets the bits
of one element of `out`'s dtype, read from a device scalar.

The plan sees the scalar with `out`'s strides (`scalar_operand`), so a
contiguous `out` takes the flat path with 128-bit stores. A float `value` is
converted when the operator is built (by the base, as ``Tensor.fill_``
converts) and kept on the device. A tensor `value` is read on every call:
`cast`'s kernel converts it into that scalar first, on the caller's stream,
so a `value` inside `out` is read before `out` is written.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.fill import Fill
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.core.tensor import TensorMeta
from infini.ops.native.cuda.elementwise import (
    ElementwiseLaunch,
    bits_pointer,
    block_indices,
    element_offsets2,
)
from infini.ops.native.cuda.ops.cast import KERNEL as CAST_KERNEL
from infini.ops.native.cuda.ops.cast import cast_constexprs
from infini.ops.runtime.triton import Kernel, require_device, torch_device


@triton.jit
def fill_kernel(
    out,
    value,
    geometry,
    numel,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    out_offset, unused = element_offsets2(index, geometry, NDIM)
    bits = tl.load(bits_pointer(value))
    tl.store(
        bits_pointer(out) + out_offset, tl.full([BLOCK], bits, bits.dtype), mask=mask
    )


KERNEL = Kernel(fill_kernel)


def scalar_operand(out) -> TensorMeta:
    """The scalar as the elementwise plan sees it: with `out`'s shape and
    strides. The kernel reads the scalar's element 0 and never its offsets;
    a stride-0 operand would keep the plan off its flat path (offset = index,
    vector stores) even for a contiguous `out`, and walk the geometry table
    instead."""
    return TensorMeta(out.shape, out.strides, out.dtype, out.device, out.torch_dtype)


@implementation(
    operator="fill",
    devices="cuda_like",
    slot=0,
)
class CudaFill(Fill):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        import torch

        out = args.out
        device = torch_device(self.device)
        scalar = TensorMeta((), (), out.dtype, out.device, out.torch_dtype)
        self.fill = ElementwiseLaunch(
            KERNEL,
            self.device,
            out,
            (scalar_operand(out),),
            # The scalar as it is, one element: it never overlaps `out`.
            guard_inputs=(scalar,),
        )
        if self.converted is not None:
            self.scalar = self.converted.to(device)
            self.convert = None
        else:
            self.scalar = torch.empty(
                (), dtype=getattr(torch, out.dtype), device=device
            )
            self.convert = ElementwiseLaunch(
                CAST_KERNEL,
                self.device,
                scalar,
                (args.value,),
                constexprs=cast_constexprs(args.value.dtype, out.dtype),
            )

    def launch(self, stream, input, value, out) -> None:
        if self.fill.numel == 0:
            return
        if self.convert is not None:
            if value.device != self.scalar.device:
                # A host scalar for a device `out`: the kernel reads device
                # memory.
                with stream_context(self.device, stream):
                    value = value.to(self.scalar.device)
            self.convert(stream, self.scalar, value)
        self.fill(stream, out, self.scalar)
