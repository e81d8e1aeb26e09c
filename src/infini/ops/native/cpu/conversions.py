"""Dtype conversions and bit copies: `unary_kernels` families that `cast`,
`copy`, `fill`, `cat`, `rearrange_infinilm` and `relu` share.

A copy moves bit patterns (`BITS_DTYPE`), so one kernel per element size
serves every dtype and keeps NaN payloads intact. A conversion loads the
source dtype, converts as torch's CPU `Tensor.to` does, and stores the
destination dtype.
"""

from __future__ import annotations

import numpy as np

from .dtype_io import BITS_DTYPE, identity
from .elementwise import unary_kernels
from .jit import helper
from .memory import STORAGE


def copy_kernels(element_size: int):
    """`unary_kernels` that copy elements of `element_size` bytes verbatim."""
    bits = BITS_DTYPE[element_size]
    return unary_kernels(identity, bits, bits, bits)


# Float to integer conversions. C++ leaves out-of-range values (and NaN)
# undefined; these follow what torch's CPU kernels do on x86-64, which is
# also exact truncation toward zero for every value in range: narrow types go
# through int32 (`cvttss2si`), `uint8` and `uint32` through int64 (torch
# converts to `uint8` through `int64_t` on purpose, so -1.0 gives 255).


@helper
def float_to_int32(value):
    return np.int32(value)


@helper
def float_to_int64(value):
    return np.int64(value)


@helper
def float_to_uint64(value):
    # Values below 2**63 (negative ones too) convert through int64 and wrap,
    # as compilers lower this conversion on x86-64.
    if value >= 9.223372036854775808e18:
        return np.uint64(value)
    return np.uint64(np.int64(value))


FLOAT_TO_INTEGER = {
    "int8": float_to_int32,
    "int16": float_to_int32,
    "int32": float_to_int32,
    "int64": float_to_int64,
    "uint8": float_to_int64,
    "uint16": float_to_int32,
    "uint32": float_to_int64,
    "uint64": float_to_uint64,
}
_FLOAT_SOURCES = ("float16", "bfloat16", "float32", "float64")


def conversion_kernels(source: str, destination: str):
    """`unary_kernels` converting `source` elements to `destination` as
    torch's CPU `Tensor.to` does (see `infini.ops.base.cast`); the same
    dtype is a bit copy."""
    if source == destination:
        return copy_kernels(STORAGE[source]().itemsize)
    transform = identity
    compute = source
    if source in _FLOAT_SOURCES and destination in FLOAT_TO_INTEGER:
        transform = FLOAT_TO_INTEGER[destination]
    elif source == "float64" and destination in ("float16", "bfloat16"):
        # torch rounds float64 to float32 first (`Half`/`BFloat16` are built
        # from a float); matching it bit for bit beats a single rounding here.
        compute = "float32"
    return unary_kernels(transform, source, destination, compute)
