"""CPU `gemm` (slot 0): NumPy's BLAS on views of the caller's tensors."""

from __future__ import annotations

from infini.ops.base.gemm import Gemm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.blas import HostView, MatmulPlan


@implementation(operator="gemm", devices=("cpu",), slot=0)
class CpuGemm(Gemm):
    def __init__(self, args) -> None:
        super().__init__(args)
        # Transposition is only a change of strides: BLAS reads column-major
        # operands in place.
        a = HostView(self.a_shape, self.a_strides, args.a.dtype)
        b = HostView(self.b_shape, self.b_strides, args.b.dtype)
        y = HostView(args.y.shape, args.y.strides, args.y.dtype)
        self.plan = MatmulPlan(a, b, y, alpha=self.alpha)

    def launch(self, stream, a, b, c, y) -> None:
        self.plan.run(a.data_ptr(), b.data_ptr(), y.data_ptr())

    @classmethod
    def precompile(cls) -> int:
        """Compiles the small-row product kernel (at most
        `weight_rows.MAX_ROWS` rows by a transposed weight) for each
        precompiled dtype; larger products run NumPy's BLAS."""
        import torch

        import infini.ops
        from infini.ops.native.cpu.precompile import torch_dtypes

        calls = 0
        for dtype in torch_dtypes():
            input = torch.zeros(4, 64, dtype=dtype)
            weight = torch.zeros(32, 64, dtype=dtype)
            out = torch.empty(4, 32, dtype=dtype)
            infini.ops.gemm(input, weight.t(), out, implementation_index=0)
            calls += 1
        return calls
