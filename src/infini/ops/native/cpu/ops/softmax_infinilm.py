"""CPU `softmax_infinilm` (slot 0): the shared row softmax (`softmax_row`)."""

from __future__ import annotations

from infini.ops.base.softmax_infinilm import SoftmaxInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.rows import precompile_calls, softmax_launch


@implementation(operator="softmax_infinilm", devices=("cpu",), slot=0)
class CpuSoftmaxInfinilm(SoftmaxInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        self.launch_rows = softmax_launch(input, out, self.dim, 1.0, causal=False)

    def launch(self, stream, input, out) -> None:
        self.launch_rows(out, input)

    @classmethod
    def precompile(cls) -> int:
        import torch

        import infini.ops

        def call(dtype, shape):
            input = torch.zeros(shape, dtype=dtype)
            out = torch.empty_like(input)
            infini.ops.softmax_infinilm(input, -1, None, out, implementation_index=0)

        return precompile_calls(call)
