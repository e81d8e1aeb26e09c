"""bitsandbytes' CPU 8-bit blockwise dequantisation (`libbitsandbytes_cpu.so`,
`cdequantize_blockwise_cpu_*`) at slot 16, through `ctypes`."""

from __future__ import annotations

import ctypes

from infini.ops.base.dequantize_blockwise_8bit import DequantizeBlockwise8bit
from infini.ops.core.registry import implementation
from infini.ops.linked.transports import c_function

# The C functions by output dtype.
SYMBOLS = {
    "float32": "cdequantize_blockwise_cpu_fp32",
    "bfloat16": "cdequantize_blockwise_cpu_bf16",
    "float16": "cdequantize_blockwise_cpu_fp16",
}

_ARGUMENT_TYPES = (
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_longlong,
    ctypes.c_longlong,
)


@implementation(operator="dequantize_blockwise_8bit", devices=("cpu",), slot=16)
class BitsandbytesDequantizeBlockwise8bit(DequantizeBlockwise8bit):
    """``cdequantize_blockwise_cpu_<dtype>(code, input, absmax, out,
    blocksize, count)`` on the data pointers, after our base's validation."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.function = c_function(
            __name__, "cpu", SYMBOLS[args.out.dtype], _ARGUMENT_TYPES
        )

    def launch(self, stream, input, absmax, code, out) -> None:
        if self.elements:
            self.function(
                code.data_ptr(),
                input.data_ptr(),
                absmax.data_ptr(),
                out.data_ptr(),
                self.blocksize,
                self.elements,
            )
