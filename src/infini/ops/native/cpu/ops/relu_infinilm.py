"""CPU `relu_infinilm` (slot 0): the kernels of `relu`."""

from __future__ import annotations

from infini.ops.base.relu_infinilm import ReluInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ops.relu import CpuRelu
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)


@implementation(operator="relu_infinilm", devices=("cpu",), slot=0)
class CpuReluInfinilm(CpuRelu, ReluInfinilm):
    """`CpuRelu` under InfiniLM's name (validation and messages from
    `ReluInfinilm`)."""

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES)
