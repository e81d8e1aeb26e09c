"""CPU `gelu_infinilm` (slot 0): the kernels of `gelu`."""

from __future__ import annotations

from infini.ops.base.gelu_infinilm import GeluInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ops.gelu import CpuGelu


@implementation(operator="gelu_infinilm", devices=("cpu",), slot=0)
class CpuGeluInfinilm(CpuGelu, GeluInfinilm):
    """`CpuGelu` under InfiniLM's name (validation and messages from
    `GeluInfinilm`)."""
