"""Reading and writing elements of each dtype inside CPU kernels.

Kernels see every tensor as an array of its `STORAGE` type (`memory.py`):
16-bit floats are `uint16` bit patterns, `bool` is `uint8`. The helpers here
load an element as the type arithmetic runs in (`COMPUTE`: 16-bit floats
widen to float32) and store a computed value back (16-bit floats rounded to
nearest even, `bool` as 0/1, other types converted as C does). `loader` and
`storer` pick the helpers for a dtype when a kernel factory runs, so one
kernel source serves every dtype.
"""

from __future__ import annotations

import numpy as np

from .jit import helper
from .memory import STORAGE
from .numeric import (
    bfloat16_bits_to_float32,
    bits_float32,
    float16_bits_to_float32,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
    float64_to_bfloat16_bits,
    float64_to_float16_bits,
)

# The type arithmetic runs in: float32 for 16-bit floats (upcast first, as the
# tests' PyTorch references do), the dtype itself otherwise.
COMPUTE = {**STORAGE, "float16": np.float32, "bfloat16": np.float32}

# Unsigned storage types by element size: copies move bit patterns, so one
# kernel per size serves every dtype (and keeps NaN payloads intact).
BITS_DTYPE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


@helper
def load_float16(array, index):
    return float16_bits_to_float32(array[index])


@helper
def load_bfloat16(array, index):
    return bfloat16_bits_to_float32(array[index])


@helper
def load_native(array, index):
    return array[index]


@helper
def store_float16(array, index, value):
    array[index] = float32_to_float16_bits(np.float32(value))


@helper
def store_float16_from_float64(array, index, value):
    array[index] = float64_to_float16_bits(np.float64(value))


@helper
def store_bfloat16(array, index, value):
    array[index] = float32_to_bfloat16_bits(np.float32(value))


@helper
def store_bfloat16_from_float64(array, index, value):
    array[index] = float64_to_bfloat16_bits(np.float64(value))


@helper
def store_bool(array, index, value):
    array[index] = 1 if value != 0 else 0


@helper
def store_native(array, index, value):
    # Assigning converts to the array's type (C semantics, as torch casts).
    array[index] = value


def loader(dtype: str):
    """`load(array, index)`: element `index` of a `STORAGE[dtype]` array,
    16-bit floats widened to float32."""
    return {"float16": load_float16, "bfloat16": load_bfloat16}.get(dtype, load_native)


def storer(dtype: str, source: str = "float32"):
    """`store(array, index, value)`: writes `value` into a `STORAGE[dtype]`
    array; 16-bit floats round to nearest even (from float64 directly when
    `source` is float64, avoiding a double rounding)."""
    wide = source == "float64"
    if dtype == "float16":
        return store_float16_from_float64 if wide else store_float16
    if dtype == "bfloat16":
        return store_bfloat16_from_float64 if wide else store_bfloat16
    if dtype == "bool":
        return store_bool
    return store_native


# Rounding a computed value as storing it would, without storing it.


@helper
def identity(value):
    """`value` unchanged: the transform of a bit copy, and the rounding of
    dtypes that hold the compute type exactly."""
    return value


@helper
def as_float16(value):
    """`value` rounded to float16 (and widened back to float32)."""
    return float16_bits_to_float32(float32_to_float16_bits(np.float32(value)))


@helper
def as_bfloat16(value):
    """`value` rounded to bfloat16 (and widened back to float32)."""
    return bits_float32(
        np.uint32(float32_to_bfloat16_bits(np.float32(value))) << np.uint32(16)
    )


def rounding(dtype: str):
    """A helper rounding a float32 value as storing it as `dtype` would."""
    return {"float16": as_float16, "bfloat16": as_bfloat16}.get(dtype, identity)
