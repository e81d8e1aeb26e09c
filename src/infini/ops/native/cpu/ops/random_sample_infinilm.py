"""CPU `random_sample_infinilm` (slot 0): one serial Numba kernel."""

from __future__ import annotations

import numpy as np

from infini.ops.base.random_sample_infinilm import RandomSampleInfinilm
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.codes import INTEGER_CODE, REAL_CODE
from infini.ops.native.cpu.precompile import index_dtypes, torch_dtypes
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

    @classmethod
    def precompile(cls) -> int:
        """Compiles the one (serial) kernel; dtypes are run-time codes of
        that compilation."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            logits = torch.zeros(64, dtype=dtype)
            for index_dtype in index_dtypes():
                out = torch.empty((), dtype=index_dtype)
                infini.ops.random_sample_infinilm(
                    logits, 0.5, 0.9, 8, 0.8, out, implementation_index=0
                )
                calls += 1
        return calls
