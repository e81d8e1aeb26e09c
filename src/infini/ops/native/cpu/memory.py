"""Raw memory access for kernels: caller tensors arrive as data addresses.

Passing addresses (ints) instead of arrays keeps the per-call overhead low and
lets one compiled kernel serve any tensor; `element_array` turns an address
into a 1-D array spanning the elements a tensor can reach.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import helper

# The NumPy storage type of each dtype. 16-bit floats are stored as `uint16`
# bit patterns (Numba has no CPU float16/bfloat16) and converted in kernels.
STORAGE = {
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.uint16,
    "bfloat16": np.uint16,
    "float32": np.float32,
    "float64": np.float64,
    "bool": np.uint8,
}


@intrinsic
def _void_pointer(typingctx, address):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


@helper
def element_array(address, count, storage):
    """A 1-D array of `count` elements of `storage` type at `address`."""
    return numba.carray(_void_pointer(address), (count,), storage)


def span(shape, strides) -> int:
    """How many elements past the data pointer a tensor reaches (0 if empty)."""
    extent = 1
    for size, stride in zip(shape, strides):
        if size == 0:
            return 0
        extent += (size - 1) * stride
    return extent


def ranges_overlap(address_a, span_a, size_a, address_b, span_b, size_b) -> bool:
    """Whether two tensors' memory ranges intersect."""
    if span_a == 0 or span_b == 0:
        return False
    end_a = address_a + span_a * size_a
    end_b = address_b + span_b * size_b
    return address_a < end_b and address_b < end_a
