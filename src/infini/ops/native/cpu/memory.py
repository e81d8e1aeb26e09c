"""Raw memory access for kernels: caller tensors arrive as data addresses.

Passing addresses (ints) instead of arrays keeps the per-call overhead low and
lets one compiled kernel serve any tensor; `element_array` turns an address
into a 1-D array spanning the elements a tensor can reach.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
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


class KnownAddresses(set):
    """Address tuples a launch has found to need no overlap handling (no
    staging, no copy aside), so that a repeated call skips its checks: a
    model calls each operator with the same buffers every step, and a
    weight or cache per layer. An operator's geometry is fixed, so the
    addresses alone decide. Emptied when `LIMIT` tuples are held."""

    LIMIT = 256

    def remember(self, addresses: tuple) -> None:
        if len(self) >= self.LIMIT:
            self.clear()
        self.add(addresses)


@intrinsic
def _void_pointer(typingctx, address):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


@helper
def element_array(address, count, storage):
    """A 1-D array of `count` elements of `storage` type at `address`."""
    return numba.carray(_void_pointer(address), (count,), storage)


# Streaming (non-temporal) stores: an output that cannot stay in the cache
# anyway is written past it, which spares reading each of its cache lines
# before overwriting it (a third less memory traffic for a copy).


@intrinsic
def store_streaming(typingctx, array, index, value):
    """``array[index] = value`` (converted to the array's type) as a
    non-temporal store. `index` must be in range: nothing is checked."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array_type, _, value_type = signature.args
        data = context.make_array(array_type)(context, builder, args[0]).data
        converted = context.cast(builder, args[2], value_type, array_type.dtype)
        store = builder.store(converted, builder.gep(data, [args[1]]))
        store.set_metadata(
            "nontemporal", builder.module.add_metadata([ir.IntType(32)(1)])
        )
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@intrinsic
def streaming_fence(typingctx):
    """Orders the streaming stores before anything the thread does next (they
    are weakly ordered: `mfence` on x86-64), so that the threads joining a
    parallel loop see them."""

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@helper
def no_fence():
    """`streaming_fence`'s stand-in for kernels that store as usual."""


def streaming_threshold() -> int:
    """Bytes an operation must move more than for its output to be streamed:
    twice the last-level cache (sysfs on Linux; 32 MiB where it is unknown), so that
    operands which could stay cached from one call to the next, and would be
    read back faster from there, are stored as usual."""
    global _STREAMING_THRESHOLD
    if _STREAMING_THRESHOLD is None:
        _STREAMING_THRESHOLD = 2 * (_last_level_cache_bytes() or 32 << 20)
    return _STREAMING_THRESHOLD


_STREAMING_THRESHOLD = None


@contextmanager
def streaming_outputs():
    """Within the block, operators built stream every output they may,
    whatever its size (`precompile` reaches the streaming kernels with small
    tensors this way)."""
    global _STREAMING_THRESHOLD
    saved = streaming_threshold()
    _STREAMING_THRESHOLD = 0
    try:
        yield
    finally:
        _STREAMING_THRESHOLD = saved


def _last_level_cache_bytes() -> int:
    largest = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = size_file.read_text().strip().upper()
            multiplier = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            number = int(text.rstrip("KMG"))
        except (OSError, ValueError):
            continue
        largest = max(largest, number * multiplier)
    return largest
