"""CPU `zeros_infinilm` (slot 0): the shared fill pass with a zero pattern."""

from __future__ import annotations

import numpy as np

from infini.ops.base.zeros_infinilm import ZerosInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.fill import FillLaunch
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)

_ZERO = np.uint64(0)


@implementation(operator="zeros_infinilm", devices=("cpu",), slot=0)
class CpuZerosInfinilm(ZerosInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.fill = FillLaunch(args.out)

    def launch(self, stream, input, out) -> None:
        # Zero bits are +0 in every dtype.
        self.fill(out.data_ptr(), _ZERO)

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise(cls.name, PRECOMPILED_DTYPES)
