"""CUDA-like `zeros_infinilm` (slot 0): ``out.zero_()`` in Triton, with
`fill`'s kernel.

`fill`'s kernel stores the bits of one device scalar into every element of
`out`, walked in the order of its strides; here the scalar is a zero of
`out`'s dtype made when the operator is built (zero bits are ``+0`` in every
dtype), planned as `fill` plans it (`scalar_operand`: a contiguous `out`
takes the flat path with 128-bit stores). `input` only supplies the
metadata and is never read.
"""

from __future__ import annotations

from infini.ops.base.zeros_infinilm import ZerosInfinilm
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.native.cuda.elementwise import ElementwiseLaunch
from infini.ops.native.cuda.ops.fill import KERNEL as FILL_KERNEL
from infini.ops.native.cuda.ops.fill import scalar_operand
from infini.ops.runtime.triton import require_device, torch_device


@implementation(operator="zeros_infinilm", devices="cuda_like", slot=0)
class CudaZerosInfinilm(ZerosInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        import torch

        out = args.out
        scalar = TensorMeta((), (), out.dtype, out.device, out.torch_dtype)
        self.fill = ElementwiseLaunch(
            FILL_KERNEL,
            self.device,
            out,
            (scalar_operand(out),),
            # The zero as it is, one element: it never overlaps `out`.
            guard_inputs=(scalar,),
        )
        self.zero = torch.zeros(
            (), dtype=getattr(torch, out.dtype), device=torch_device(self.device)
        )

    def launch(self, stream, input, out) -> None:
        self.fill(stream, out, self.zero)
