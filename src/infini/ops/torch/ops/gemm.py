"""PyTorch `gemm` (slot 2, every device)."""

from __future__ import annotations

from infini.ops.base.gemm import Gemm
from infini.ops.core.devices import CUDA_LIKE_PLATFORMS
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.torch._common import shares_memory

# Platforms whose torch has `addmm`/`baddbmm` with `out=` and `beta=0`.
_BLAS_PLATFORMS = ("cpu", *CUDA_LIKE_PLATFORMS)


@implementation(operator="gemm", devices="all", slot=2)
class TorchGemm(Gemm):
    """``y = alpha * op(a) @ op(b)`` with `torch.addmm` (2-D) or
    `torch.baddbmm` (batched) and ``beta=0`` on CPU and CUDA-like devices,
    so `y`'s old contents are ignored; elsewhere `torch.matmul` scaled by
    `alpha`. Batch dimensions of size 1, stride 0, or a 2-D operand in a
    batched product broadcast. A `y` sharing memory with `a` or `b` gets the
    result through a copy.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        self.batched = args.y.ndim == 3
        self.batch = args.y.shape[0] if self.batched else None
        self.blas = self.device.platform in _BLAS_PLATFORMS

    def _operands(self, a, b):
        if self.trans_a:
            a = a.transpose(-1, -2)
        if self.trans_b:
            b = b.transpose(-1, -2)
        if self.batched:
            a = a.expand(self.batch, *a.shape[-2:])
            b = b.expand(self.batch, *b.shape[-2:])
        return a, b

    def launch(self, stream, a, b, c, y) -> None:
        import torch

        a, b = self._operands(a, b)
        with stream_context(self.device, stream):
            if not self.blas:
                product = torch.matmul(a, b)
                y.copy_(product if self.alpha == 1 else product * self.alpha)
                return
            function = torch.baddbmm if self.batched else torch.addmm
            if shares_memory(y, a, b):
                y.copy_(function(y, a, b, beta=0, alpha=self.alpha))
            else:
                function(y, a, b, beta=0, alpha=self.alpha, out=y)
