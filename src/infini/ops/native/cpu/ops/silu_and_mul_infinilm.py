"""CPU `silu_and_mul_infinilm` (slot 0): the kernels of `silu_and_mul`."""

from __future__ import annotations

from infini.ops.base.silu_and_mul_infinilm import SiluAndMulInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ops.silu_and_mul import CpuSiluAndMul


@implementation(operator="silu_and_mul_infinilm", devices=("cpu",), slot=0)
class CpuSiluAndMulInfinilm(CpuSiluAndMul, SiluAndMulInfinilm):
    """`CpuSiluAndMul` under InfiniLM's name (validation and messages from
    `SiluAndMulInfinilm`)."""
