"""CPU `sigmoid_infinilm` (slot 0): the kernels of `sigmoid`."""

from __future__ import annotations

from infini.ops.base.sigmoid_infinilm import SigmoidInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ops.sigmoid import CpuSigmoid


@implementation(operator="sigmoid_infinilm", devices=("cpu",), slot=0)
class CpuSigmoidInfinilm(CpuSigmoid, SigmoidInfinilm):
    """`CpuSigmoid` under InfiniLM's name (validation and messages from
    `SigmoidInfinilm`)."""
