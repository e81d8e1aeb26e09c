"""CPU `ggml_interleave` (slot 0): NumPy's reshapes and transposes of the
blocks' fields (`infini.ops.native.cpu.ggml_interleaved.interleave`), run
once per weight at load time."""

from __future__ import annotations

from infini.ops.base.ggml_interleave import GgmlInterleave
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ggml_interleaved import byte_rows, interleave


@implementation(operator="ggml_interleave", devices=("cpu",), slot=0)
class CpuGgmlInterleave(GgmlInterleave):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.shape = tuple(args.weight.shape)
        self.quant_type = args.quant_type

    @classmethod
    def precompile(cls) -> int:
        """Nothing to compile: NumPy does the work."""
        return 0

    def launch(self, stream, weight, out) -> None:
        rows, width = self.shape
        if rows == 0:
            return
        # The whole result is built before `out` is written: `out` may be
        # `weight`.
        result = interleave(byte_rows(weight.data_ptr(), rows, width), self.quant_type)
        byte_rows(out.data_ptr(), rows, width)[...] = result
