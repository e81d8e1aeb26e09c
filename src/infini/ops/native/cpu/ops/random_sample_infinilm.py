"""CPU `random_sample_infinilm` (slot 0): one serial Numba kernel."""

from __future__ import annotations

import numpy as np

from infini.ops.base.random_sample_infinilm import RandomSampleInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.codes import INTEGER_CODE, REAL_CODE
from infini.ops.native.cpu.memory import span
from infini.ops.native.cpu.sampling import random_sample_kernel


@implementation(operator="random_sample_infinilm", devices=("cpu",), slot=0)
class CpuRandomSampleInfinilm(RandomSampleInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        logits = args.logits
        self.span = span(logits.shape, logits.strides)
        self.step = logits.strides[0]
        self.codes = np.array(
            [REAL_CODE[logits.dtype], INTEGER_CODE[args.out.dtype]], np.int64
        )
        self.kernel = random_sample_kernel()

    def launch(self, stream, logits, out) -> None:
        self.kernel(
            out.data_ptr(),
            logits.data_ptr(),
            self.span,
            self.vocab,
            self.step,
            self.codes,
            self.random_val,
            self.topp,
            self.topk,
            self.temperature,
        )
