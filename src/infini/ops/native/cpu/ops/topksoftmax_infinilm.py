"""CPU `topksoftmax_infinilm` (slot 0): the top-k gating kernel over tokens."""

from __future__ import annotations

from infini.ops.base.topksoftmax_infinilm import TopksoftmaxInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import torch_dtypes
from infini.ops.native.cpu.routing import TopkGatingLaunch


@implementation(operator="topksoftmax_infinilm", devices=("cpu",), slot=0)
class CpuTopksoftmaxInfinilm(TopkGatingLaunch, TopksoftmaxInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan("softmax", args.input, None, None, args.values, args.indices, None)

    def launch(self, stream, input, values, indices) -> None:
        self.run(input, None, None, values, indices, None, self.norm, 1.0)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial (few tokens) and parallel kernels; dtypes are
        run-time codes of one compilation."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for tokens in (1, 512):
                input = torch.zeros(tokens, 64, dtype=dtype)
                values = torch.empty(tokens, 8)
                indices = torch.empty(tokens, 8, dtype=torch.int32)
                infini.ops.topksoftmax_infinilm(
                    input, 8, True, values, indices, implementation_index=0
                )
                calls += 1
        return calls
