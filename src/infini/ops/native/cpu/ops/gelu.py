"""CPU `gelu` (slot 0): the shared unary elementwise pass with exact (erf)
or tanh-approximated GELU."""

from __future__ import annotations

from infini.ops.base.gelu import Gelu
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.activations import (
    gelu_erf,
    gelu_erf_float32,
    gelu_erf_float32_short,
    gelu_tanh_float32,
    gelu_tanh_float64,
)
from infini.ops.native.cpu.elementwise import UnaryElementwise, unary_kernels
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


def gelu_kernels(dtype: str, approximate: str):
    """The `unary_kernels` of GELU on `dtype` (shared with `gelu_infinilm`
    and `gelutanh_infinilm`)."""
    if approximate == "tanh":
        tanh = gelu_tanh_float64 if dtype == "float64" else gelu_tanh_float32
        return unary_kernels(tanh, dtype, dtype, dtype)
    if dtype == "float64":
        # libm's `erfc` in float64.
        return unary_kernels(gelu_erf, dtype, dtype, dtype)
    # Vectorisable float32 arithmetic (16-bit inputs are widened to float32),
    # to the precision the result keeps.
    if dtype == "float32":
        return unary_kernels(gelu_erf_float32, dtype, dtype, dtype)
    return unary_kernels(gelu_erf_float32_short, dtype, dtype, dtype)


@implementation(operator="gelu", devices=("cpu",), slot=0)
class CpuGelu(Gelu):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.launch = UnaryElementwise(
            args.out, args.input, gelu_kernels(args.out.dtype, self.approximate)
        ).launch

    @classmethod
    def precompile(cls) -> int:
        return sum(
            precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES, approximate)
            for approximate in ("none", "tanh")
        )
