"""CUDA-like `silu_and_mul_infinilm` (slot 0): `silu_and_mul`'s kernel under
InfiniLM's name (the gated elementwise template,
``out = silu(input[..., :h]) * input[..., h:]``)."""

from __future__ import annotations

from infini.ops.base.silu_and_mul_infinilm import SiluAndMulInfinilm
from infini.ops.core.registry import implementation

# The module, not only the class: planning finds its helpers there (the
# sm_90 checks patch `require_device` on it).
from infini.ops.native.cuda.ops import silu_and_mul


@implementation(operator="silu_and_mul_infinilm", devices="cuda_like", slot=0)
class CudaSiluAndMulInfinilm(silu_and_mul.CudaSiluAndMul, SiluAndMulInfinilm):
    """`CudaSiluAndMul` under InfiniLM's name (validation and messages from
    `SiluAndMulInfinilm`)."""
