"""CPU `ggml_mul_mat_interleaved_a8` (slot 0): integer dot products of
eight rows at a time, parallel over tiles; on a CPU without byte dot
products (VNNI), from `INTERLEAVED_TILED_MIN_TOKENS` tokens, the tiled BLAS
path over panels put back into the file's layout
(`infini.ops.native.cpu.ggml_interleaved`)."""

from __future__ import annotations

from infini.ops.base._ggml import INTERLEAVED_TYPES
from infini.ops.base.ggml_mul_mat_interleaved_a8 import GgmlMulMatInterleavedA8
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ggml import precompile_product
from infini.ops.native.cpu.ggml_interleaved import (
    INTERLEAVED_TILED_MIN_TOKENS,
    interleaved_plan,
)


@implementation(operator="ggml_mul_mat_interleaved_a8", devices=("cpu",), slot=0)
class CpuGgmlMulMatInterleavedA8(GgmlMulMatInterleavedA8):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan = interleaved_plan(
            args.quant_type, args.weight, args.x, args.out, self.rows
        )
        self.launch_plan = self.plan.launch
        self.bind_plan = self.plan.bind

    def launch(self, stream, weight, x, out) -> None:
        self.launch_plan(weight, x, out)

    def bind_launch(self, stream, weight, x, out):
        return self.bind_plan(weight, x, out)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial and parallel tile kernels of each type and
        activation dtype, and the tiled path's kernels where the CPU takes
        it."""
        return precompile_product(
            "ggml_mul_mat_interleaved_a8",
            INTERLEAVED_TYPES,
            many=INTERLEAVED_TILED_MIN_TOKENS,
        )
