"""CUDA-like `matmul` (slot 0) in Triton: ``out = torch.matmul(input,
other)`` on the product kernels of `native/cuda/products.py`.

A 1-D `input` is one row (stride 0 along M) and a 1-D `other` one column
(stride 0 along N), their dimension absent from `out`; the batch
dimensions broadcast with stride 0 (missing or size-1 dimensions). When
`other` is shared by the batch, the batch is one product of all the rows
of `input`; a product of many rows by one column is computed as its
transpose, a row times a matrix, on the rows kernel.
"""

from __future__ import annotations

from infini.ops.base.matmul import Matmul
from infini.ops.core.geometry import broadcast_strides
from infini.ops.core.registry import implementation
from infini.ops.native.cuda import products
from infini.ops.runtime.triton import require_device


@implementation(operator="matmul", devices="cuda_like", slot=0)
class CudaMatmul(Matmul):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, other, out = args.input, args.other, args.out
        k = input.shape[-1]
        if input.ndim >= 2:
            m, a_strides = input.shape[-2], input.strides[-2:]
        else:
            m, a_strides = 1, (0, input.strides[0])
        if other.ndim >= 2:
            n, b_strides = other.shape[-1], other.strides[-2:]
        else:
            n, b_strides = 1, (other.strides[0], 0)
        # `out` is (*batch, [m], [n]): the dimensions a 1-D operand drops
        # have stride 0.
        batch_ndim = out.ndim - (input.ndim >= 2) - (other.ndim >= 2)
        batch = out.shape[:batch_ndim]
        out_tail = list(out.strides[batch_ndim:])
        out_m = out_tail.pop(0) if input.ndim >= 2 else 0
        out_n = out_tail.pop(0) if other.ndim >= 2 else 0
        layout = products.ProductLayout(
            batch,
            broadcast_strides(input.shape[:-2], input.strides[:-2], batch),
            broadcast_strides(other.shape[:-2], other.strides[:-2], batch),
            out.strides[:batch_ndim],
            m,
            n,
            k,
            a_strides,
            b_strides,
            (out_m, out_n),
        )
        self.plan = products.ProductPlan(
            self, layout, input.dtype, out, (input, other), output="out"
        )

    def launch(self, stream, input, other, out) -> None:
        self.plan(stream, out, input, other, None)
