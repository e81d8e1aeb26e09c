"""CPU `relu` (slot 0)."""

from __future__ import annotations

import numpy as np

from infini.ops.base.relu import Relu
from infini.ops.core.dtypes import UNSIGNED_INTEGER_DTYPES
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.conversions import copy_kernels
from infini.ops.native.cpu.elementwise import UnaryElementwise, unary_kernels
from infini.ops.native.cpu.jit import helper
from infini.ops.native.cpu.precompile import (
    PRECOMPILED_DTYPES,
    precompile_unary_elementwise,
)

# Floats are handled as their bit patterns (unsigned integers of the same
# width): a value is negative exactly when its pattern lies above the
# negative zero and at most the negative infinity, so `-0.0` and every NaN
# (whatever its sign bit and payload) are kept bit for bit, as in torch.


@helper
def _relu_float16_bits(bits):
    if np.uint16(0x8000) < bits <= np.uint16(0xFC00):
        return np.uint16(0)
    return bits


@helper
def _relu_bfloat16_bits(bits):
    if np.uint16(0x8000) < bits <= np.uint16(0xFF80):
        return np.uint16(0)
    return bits


@helper
def _relu_float32_bits(bits):
    if np.uint32(0x80000000) < bits <= np.uint32(0xFF800000):
        return np.uint32(0)
    return bits


@helper
def _relu_float64_bits(bits):
    if np.uint64(0x8000000000000000) < bits <= np.uint64(0xFFF0000000000000):
        return np.uint64(0)
    return bits


@helper
def _relu_integer(value):
    return value if value > 0 else value - value


_FLOAT_KERNELS = {
    "float16": (_relu_float16_bits, "uint16"),
    "bfloat16": (_relu_bfloat16_bits, "uint16"),
    "float32": (_relu_float32_bits, "uint32"),
    "float64": (_relu_float64_bits, "uint64"),
}


def relu_kernels(dtype: str, element_size: int):
    """The `unary_kernels` of `relu` for `dtype` (shared with `relu_infinilm`)."""
    if dtype in UNSIGNED_INTEGER_DTYPES:
        # Nothing is negative: a copy.
        return copy_kernels(element_size)
    if dtype in _FLOAT_KERNELS:
        transform, bits = _FLOAT_KERNELS[dtype]
        return unary_kernels(transform, bits, bits, bits)
    return unary_kernels(_relu_integer, dtype, dtype, dtype)


@implementation(operator="relu", devices=("cpu",), slot=0)
class CpuRelu(Relu):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        # Staged when `out` overlaps `input` other than in place.
        self.launch = UnaryElementwise(
            out, input, relu_kernels(out.dtype, out.element_size)
        ).launch

    @classmethod
    def precompile(cls) -> int:
        return precompile_unary_elementwise("relu", PRECOMPILED_DTYPES)
