"""bitsandbytes' CPU NF4 dequantisation (`libbitsandbytes_cpu.so`,
`cdequantize_blockwise_cpu_nf4_*`) at slot 16, through `ctypes`."""

from __future__ import annotations

import ctypes

from infini.ops.base.dequantize_nf4 import DequantizeNf4
from infini.ops.core.registry import implementation
from infini.ops.linked.transports import c_function, unsupported

# The C functions by output dtype.
SYMBOLS = {
    "float32": "cdequantize_blockwise_cpu_nf4_fp32",
    "bfloat16": "cdequantize_blockwise_cpu_nf4_bf16",
    "float16": "cdequantize_blockwise_cpu_nf4_fp16",
}

# bitsandbytes' own CPU backend avoids its AVX512 kernel from this block size
# up ("accuracy issues"), so the binding does too.
LARGEST_BLOCKSIZE = 1024

_ARGUMENT_TYPES = (
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_longlong,
    ctypes.c_longlong,
    ctypes.c_longlong,
)


@implementation(operator="dequantize_nf4", devices=("cpu",), slot=16)
class BitsandbytesDequantizeNf4(DequantizeNf4):
    """``cdequantize_blockwise_cpu_nf4_<dtype>(input, absmax, out, blocksize,
    rows, cols)`` on the data pointers, after our base's validation.

    bitsandbytes walks `out` as ``rows x cols``: ``cols`` is the last
    dimension when it holds whole blocks, else every element (one row).
    Block sizes above 1024 are rejected.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        out = args.out
        if self.blocksize > LARGEST_BLOCKSIZE:
            raise unsupported(
                self.name,
                "bitsandbytes",
                f"supports `blocksize` up to {LARGEST_BLOCKSIZE}, got "
                f"{self.blocksize}.",
            )
        # bitsandbytes scales each row on its own when a block ends inside a
        # row; its blocks follow ours only when rows hold whole blocks, so
        # other shapes are passed as one row.
        columns = out.shape[-1] if out.ndim else 1
        if columns % self.blocksize:
            columns = self.elements
        self.columns = columns
        self.rows = self.elements // columns if columns else 0
        self.function = c_function(__name__, "cpu", SYMBOLS[out.dtype], _ARGUMENT_TYPES)

    def launch(self, stream, input, absmax, out) -> None:
        if self.elements:
            self.function(
                input.data_ptr(),
                absmax.data_ptr(),
                out.data_ptr(),
                self.blocksize,
                self.rows,
                self.columns,
            )
