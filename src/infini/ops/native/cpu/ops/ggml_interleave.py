"""CPU `ggml_interleave` (slot 0): NumPy's strided copies of the blocks'
fields (`infini.ops.native.cpu.ggml_interleaved.interleave`), run once per
weight at load time."""

from __future__ import annotations

import numpy as np

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
        source = byte_rows(weight.data_ptr(), rows, width)
        target = byte_rows(out.data_ptr(), rows, width)
        if np.shares_memory(source, target):
            # `out` may be `weight`: the whole result is built first.
            target[...] = interleave(source, self.quant_type)
        else:
            interleave(source, self.quant_type, target)
