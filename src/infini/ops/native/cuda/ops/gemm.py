"""CUDA-like `gemm` (slot 0) in Triton: ``y = alpha * op(a) @ op(b)`` on the
product kernels of `native/cuda/products.py`.

`trans_a` / `trans_b` only swap the strides the kernel reads: transposed
and strided operands are read in place. A batch dimension of size 1 or
stride 0, or a 2-D operand in a batched product, has batch stride 0; when
`b` is shared by the whole batch, the batch is one product of all the rows
of `a`.
"""

from __future__ import annotations

from infini.ops.base.gemm import Gemm
from infini.ops.core.registry import implementation
from infini.ops.native.cuda import products
from infini.ops.runtime.triton import require_device


def _batch_stride(shape, strides, batched: bool) -> tuple[int, ...]:
    """The stride of an operand along the batch (0 when it is shared)."""
    if not batched:
        return ()
    if len(shape) < 3 or shape[0] == 1:
        return (0,)
    return (strides[0],)


@implementation(operator="gemm", devices="cuda_like", slot=0)
class CudaGemm(Gemm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        a, b, y = args.a, args.b, args.y
        batched = y.ndim == 3
        layout = products.ProductLayout(
            y.shape[:-2],
            _batch_stride(a.shape, a.strides, batched),
            _batch_stride(b.shape, b.strides, batched),
            _batch_stride(y.shape, y.strides, batched),
            self.m,
            self.n,
            self.k,
            self.a_strides[-2:],
            self.b_strides[-2:],
            y.strides[-2:],
        )
        self.plan = products.ProductPlan(
            self, layout, y.dtype, y, (a, b), output="y", alpha=self.alpha
        )

    def launch(self, stream, a, b, c, y) -> None:
        self.plan(stream, y, a, b, None)
