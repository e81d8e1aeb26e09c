"""CPU `dequantize_blockwise_8bit` (slot 0): a code-book lookup and a scale
per element, parallel over chunks of elements."""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from infini.ops.base.dequantize_blockwise_8bit import DequantizeBlockwise8bit
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.jit import kernel
from infini.ops.native.cpu.memory import STORAGE, element_array
from infini.ops.native.cpu.numeric import (
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
)

# Elements per parallel chunk: large enough to amortise the thread start-up.
CHUNK_ELEMENTS = 32768


@cache
def dequantize_kernel(dtype: str):
    """``run(out, input, absmax, code, count, blocksize, chunks)`` on addresses."""
    storage = STORAGE[dtype]
    if dtype == "bfloat16":
        convert = float32_to_bfloat16_bits
    elif dtype == "float16":
        convert = float32_to_float16_bits
    else:
        convert = np.float32

    @kernel(parallel=True)
    def run(
        out_address,
        input_address,
        absmax_address,
        code_address,
        count,
        blocksize,
        chunks,
    ):
        values = element_array(input_address, count, np.uint8)
        scales = element_array(absmax_address, (count - 1) // blocksize + 1, np.float32)
        code = element_array(code_address, 256, np.float32)
        out = element_array(out_address, count, storage)
        for chunk in prange(chunks):
            first = chunk * count // chunks
            last = (chunk + 1) * count // chunks
            for index in range(first, last):
                out[index] = convert(code[values[index]] * scales[index // blocksize])
        return 0

    return run


@implementation(operator="dequantize_blockwise_8bit", devices=("cpu",), slot=0)
class CpuDequantizeBlockwise8bit(DequantizeBlockwise8bit):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.chunks = max(1, min(256, self.elements // CHUNK_ELEMENTS))
        self.run = dequantize_kernel(args.out.dtype)

    def launch(self, stream, input, absmax, code, out) -> None:
        if self.elements:
            self.run(
                out.data_ptr(),
                input.data_ptr(),
                absmax.data_ptr(),
                code.data_ptr(),
                self.elements,
                self.blocksize,
                self.chunks,
            )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each output dtype."""
        import torch

        import infini.ops
        from infini.ops.base.dequantize_blockwise_8bit import (
            DEQUANTIZE_BLOCKWISE_8BIT_DTYPES,
        )

        calls = 0
        for name in DEQUANTIZE_BLOCKWISE_8BIT_DTYPES:
            input = torch.zeros(64, dtype=torch.uint8)
            absmax = torch.ones(1)
            code = torch.zeros(256)
            out = torch.empty(64, dtype=getattr(torch, name))
            infini.ops.dequantize_blockwise_8bit(
                input, absmax, code, 64, out, implementation_index=0
            )
            calls += 1
        return calls
