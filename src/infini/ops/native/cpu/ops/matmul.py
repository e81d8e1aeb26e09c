"""CPU `matmul` (slot 0; the original has none): NumPy's BLAS on views of
the caller's tensors."""

from __future__ import annotations

from infini.ops.base.matmul import Matmul
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.blas import HostView, MatmulPlan


@implementation(operator="matmul", devices=("cpu",), slot=0)
class CpuMatmul(Matmul):
    def __init__(self, args) -> None:
        super().__init__(args)
        # NumPy's matmul has torch.matmul's shape rules (1-D promotion and
        # batch broadcasting), so the views keep the callers' shapes.
        self.plan = MatmulPlan(
            *(
                HostView(m.shape, m.strides, m.dtype)
                for m in (args.input, args.other, args.out)
            )
        )

    def launch(self, stream, input, other, out) -> None:
        self.plan.run(input.data_ptr(), other.data_ptr(), out.data_ptr())

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
            infini.ops.matmul(input, weight.t(), out, implementation_index=0)
            calls += 1
        return calls
