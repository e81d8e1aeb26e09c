"""CPU `ggml_mul_mat_vec_a8` (slot 0): the activations quantised to 8 bits once per
call, then, below `tiled_min_tokens()` tokens, integer dot products straight
from the packed blocks, parallel over tiles of output rows; from it, float32
BLAS over panels of the weight dequantised into a cache-sized scratch
(`infini.ops.native.cpu.ggml`)."""

from __future__ import annotations

from infini.ops.base.ggml_mul_mat_vec_a8 import GgmlMulMatVecA8
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ggml import precompile_product, product_plan


@implementation(operator="ggml_mul_mat_vec_a8", devices=("cpu",), slot=0)
class CpuGgmlMulMatVecA8(GgmlMulMatVecA8):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.plan = product_plan(
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
        """Compiles the serial and parallel integer kernels and the tiled
        path's kernels of each supported type and activation dtype."""
        return precompile_product("ggml_mul_mat_vec_a8")
