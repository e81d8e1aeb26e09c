"""CPU `cast` (slot 0).

One kernel per (source, destination) dtype pair, compiled the first time the
pair is used; a cast to the same dtype is a bit copy shared by every dtype of
that element size.
"""

from __future__ import annotations

import numpy as np

from infini.ops.base.cast import Cast
from infini.ops.core.dtypes import FLOAT_DTYPES, LOW_PRECISION_FLOAT_DTYPES
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.elementwise import (
    AliasGuard,
    UnaryLaunch,
    copy_kernels,
    identity,
    staging_like,
    unary_kernels,
)
from infini.ops.native.cpu.jit import helper

# Float to integer conversions. C++ leaves out-of-range values (and NaN)
# undefined; these follow what torch's CPU kernels do on x86-64, which is
# also exact truncation toward zero for every value in range: narrow types go
# through int32 (`cvttss2si`), `uint8` and `uint32` through int64 (torch
# converts to `uint8` through `int64_t` on purpose, so -1.0 gives 255).


@helper
def _float_to_int32(value):
    return np.int32(value)


@helper
def _float_to_int64(value):
    return np.int64(value)


@helper
def _float_to_uint64(value):
    # Values below 2**63 (negative ones too) convert through int64 and wrap,
    # as compilers lower this conversion on x86-64.
    if value >= 9.223372036854775808e18:
        return np.uint64(value)
    return np.uint64(np.int64(value))


_FLOAT_TO_INTEGER = {
    "int8": _float_to_int32,
    "int16": _float_to_int32,
    "int32": _float_to_int32,
    "int64": _float_to_int64,
    "uint8": _float_to_int64,
    "uint16": _float_to_int32,
    "uint32": _float_to_int64,
    "uint64": _float_to_uint64,
}


def cast_kernels(source: str, destination: str, element_size: int):
    """The serial and parallel kernels converting `source` to `destination`."""
    if source == destination:
        return copy_kernels(element_size)
    transform = identity
    compute = source
    if source in FLOAT_DTYPES and destination in _FLOAT_TO_INTEGER:
        transform = _FLOAT_TO_INTEGER[destination]
    elif source == "float64" and destination in LOW_PRECISION_FLOAT_DTYPES:
        # torch rounds float64 to float32 first (`Half`/`BFloat16` are built
        # from a float); matching it bit for bit beats a single rounding here.
        compute = "float32"
    return unary_kernels(transform, source, destination, compute)


@implementation(operator="cast", devices=("cpu",), slot=0)
class CpuCast(Cast):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        self.run = UnaryLaunch(
            out.shape,
            out.strides,
            input.strides,
            cast_kernels(input.dtype, out.dtype, out.element_size),
        )
        self.alias = AliasGuard(out, out.strides, [(input, input.strides)])

    def launch(self, stream, input, out) -> None:
        if self.run.numel == 0:
            return
        out_address = out.data_ptr()
        input_address = input.data_ptr()
        if self.alias.needs_staging(out_address, (input_address,)):
            target = staging_like(out)
            self.run(target.data_ptr(), input_address)
            out.copy_(target)
        else:
            self.run(out_address, input_address)
