"""CUDA-like `linear` (slot 0) in Triton: ``out = input @ weight.T + bias``
on the product kernels of `native/cuda/products.py`.

`weight` is read in place as the ``(k, n)`` operand ``weight.T`` (a
row-major weight is contiguous along K, which the kernels stream with
vector loads). The leading dimensions of `input` and `out` are one tall
product when their strides allow it (always for contiguous tensors), else
a batch of products sharing the weight. The bias is added to the float32
(float64) accumulator and the sum rounded once. Decode steps (up to
`products.ROWS_KERNEL_LIMIT` rows) take the memory-bound rows kernel; more
rows take `tl.dot` tiles.
"""

from __future__ import annotations

from infini.ops.base.linear import Linear
from infini.ops.core.registry import implementation
from infini.ops.native.cuda import products
from infini.ops.runtime.triton import require_device


@implementation(operator="linear", devices="cuda_like", slot=0)
class CudaLinear(Linear):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, weight, bias, out = args.input, args.weight, args.bias, args.out
        out_features, in_features = weight.shape
        leading = input.shape[:-1]
        # Every leading dimension is a batch dimension of one row; the
        # layout folds them into the rows of one product.
        layout = products.ProductLayout(
            leading,
            input.strides[:-1],
            (0,) * len(leading),
            out.strides[:-1],
            1,
            out_features,
            in_features,
            (0, input.strides[-1]),
            (weight.strides[1], weight.strides[0]),
            (0, out.strides[-1]),
            transposable=bias is None,
        )
        self.plan = products.ProductPlan(
            self,
            layout,
            input.dtype,
            out,
            (input, weight, bias),
            output="out",
            bias=bias,
        )

    def launch(self, stream, input, weight, bias, out) -> None:
        self.plan(stream, out, input, weight, bias)
