"""CPU `cast` (slot 0).

One kernel per (source, destination) dtype pair, compiled the first time the
pair is used; a cast to the same dtype is a bit copy shared by every dtype of
that element size.
"""

from __future__ import annotations

from infini.ops.base.cast import Cast
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.conversions import conversion_kernels
from infini.ops.native.cpu.elementwise import UnaryElementwise
from infini.ops.native.cpu.precompile import torch_dtypes, unary_layouts


@implementation(operator="cast", devices=("cpu",), slot=0)
class CpuCast(Cast):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        # Staged when `out` overlaps `input` other than element for element.
        self.launch = UnaryElementwise(
            out, input, conversion_kernels(input.dtype, out.dtype)
        ).launch

    @classmethod
    def precompile(cls) -> int:
        """Compiles every pair of precompiled dtypes (a same-dtype cast is
        the bit copy of its element size) on each layout class."""
        import infini.ops

        calls = 0
        for source in torch_dtypes():
            for destination in torch_dtypes():
                for input, out in unary_layouts(source, destination):
                    infini.ops.cast(input, out, implementation_index=0)
                    calls += 1
        return calls
