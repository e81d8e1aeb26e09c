"""CPU `dequantize_nf4` (slot 0): one pass over the packed bytes, two
outputs per byte, parallel over chunks of bytes."""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from infini.ops.base.dequantize_nf4 import NF4_LEVELS, DequantizeNf4
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.jit import kernel
from infini.ops.native.cpu.memory import STORAGE, element_array
from infini.ops.native.cpu.numeric import (
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
)

# Bytes per parallel chunk: large enough to amortise the thread start-up.
CHUNK_BYTES = 16384

_LEVELS = np.array(NF4_LEVELS, dtype=np.float32)


@cache
def dequantize_kernel(dtype: str):
    """``run(out, input, absmax, bytes, blocksize, chunks)`` on addresses."""
    storage = STORAGE[dtype]
    if dtype == "bfloat16":
        convert = float32_to_bfloat16_bits
    elif dtype == "float16":
        convert = float32_to_float16_bits
    else:
        convert = np.float32
    levels = _LEVELS

    @kernel(parallel=True)
    def run(out_address, input_address, absmax_address, count, blocksize, chunks):
        packed = element_array(input_address, count, np.uint8)
        scales = element_array(
            absmax_address, (2 * count - 1) // blocksize + 1, np.float32
        )
        out = element_array(out_address, 2 * count, storage)
        for chunk in prange(chunks):
            first = chunk * count // chunks
            last = (chunk + 1) * count // chunks
            for byte in range(first, last):
                value = packed[byte]
                # Both codes of a byte share a block: `blocksize` is even.
                scale = scales[2 * byte // blocksize]
                out[2 * byte] = convert(levels[value >> 4] * scale)
                out[2 * byte + 1] = convert(levels[value & 15] * scale)
        return 0

    return run


@implementation(operator="dequantize_nf4", devices=("cpu",), slot=0)
class CpuDequantizeNf4(DequantizeNf4):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.bytes = self.elements // 2
        self.chunks = max(1, min(256, self.bytes // CHUNK_BYTES))
        self.run = dequantize_kernel(args.out.dtype)

    def launch(self, stream, input, absmax, out) -> None:
        if self.bytes:
            self.run(
                out.data_ptr(),
                input.data_ptr(),
                absmax.data_ptr(),
                self.bytes,
                self.blocksize,
                self.chunks,
            )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each output dtype."""
        import torch

        import infini.ops
        from infini.ops.base.dequantize_nf4 import DEQUANTIZE_NF4_DTYPES

        calls = 0
        for name in DEQUANTIZE_NF4_DTYPES:
            input = torch.zeros(32, dtype=torch.uint8)
            absmax = torch.ones(1)
            out = torch.empty(64, dtype=getattr(torch, name))
            infini.ops.dequantize_nf4(input, absmax, 64, out, implementation_index=0)
            calls += 1
        return calls
