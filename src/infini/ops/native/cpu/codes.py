"""Runtime dtype codes for kernels that serve every dtype combination with
one compiled body (routing and sampling kernels take several tensors of
independent dtypes; compiling one kernel per combination would cost
minutes of cold start).

A tensor is viewed through every storage it may have (`float32` and
`uint16` for real numbers; `uint8`, `int32` and `int64` for integers) and
the code, a small integer passed at run time, picks the view. Branching
per element costs little next to the work these kernels do per element.
"""

from __future__ import annotations

import numpy as np

from .jit import helper
from .numeric import (
    bfloat16_bits_to_float32,
    float16_bits_to_float32,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
)

# Real tensors: float32, float16, bfloat16.
REAL_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
# Integer tensors (0: absent). 32-bit codes serve uint32 outputs as well (the
# stored bits are the same); 1-byte tensors (bool flags) are only compared
# with zero.
INTEGER_CODE = {
    None: 0,
    "int32": 1,
    "uint32": 1,
    "int64": 2,
    "bool": 3,
    "int8": 3,
    "uint8": 3,
}


def real_code(meta) -> int:
    return REAL_CODE[meta.dtype]


def integer_code(meta) -> int:
    return INTEGER_CODE[None if meta is None else meta.dtype]


@helper
def load_real(f32, u16, code, index):
    """Element `index` as float32, from the view `code` selects."""
    if code == 0:
        return f32[index]
    if code == 1:
        return float16_bits_to_float32(u16[index])
    return bfloat16_bits_to_float32(u16[index])


@helper
def store_real(f32, u16, code, index, value):
    """Rounds the float32 `value` to nearest even into the selected view."""
    if code == 0:
        f32[index] = value
    elif code == 1:
        u16[index] = float32_to_float16_bits(np.float32(value))
    else:
        u16[index] = float32_to_bfloat16_bits(np.float32(value))


@helper
def load_integer(u8, i32, i64, code, index):
    if code == 1:
        return np.int64(i32[index])
    if code == 2:
        return i64[index]
    return np.int64(u8[index])


@helper
def store_integer(i32, i64, code, index, value):
    if code == 2:
        i64[index] = value
    else:
        i32[index] = value


@helper
def load_real_row(target, n, f32, u16, code, base, step):
    """Reads `n` elements starting at `base` (every `step`) into the float32
    array `target`. The dtype branch sits outside the loops, and contiguous
    rows go through slices (indices known to be non-negative), so the loops
    vectorise."""
    if step == 1:
        if code == 0:
            row32 = f32[base : base + n]
            for i in range(n):
                target[i] = row32[i]
        else:
            row16 = u16[base : base + n]
            if code == 1:
                for i in range(n):
                    target[i] = float16_bits_to_float32(row16[i])
            else:
                for i in range(n):
                    target[i] = bfloat16_bits_to_float32(row16[i])
    elif code == 0:
        for i in range(n):
            target[i] = f32[base + i * step]
    elif code == 1:
        for i in range(n):
            target[i] = float16_bits_to_float32(u16[base + i * step])
    else:
        for i in range(n):
            target[i] = bfloat16_bits_to_float32(u16[base + i * step])


@helper
def store_real_row(source, n, f32, u16, code, base, step):
    """Writes the first `n` elements of the float32 array `source` from
    `base` (every `step`), rounded to the selected view; the counterpart of
    `load_real_row` (branches outside the loops, slices for contiguous
    rows, so the loops vectorise)."""
    if step == 1:
        if code == 0:
            row32 = f32[base : base + n]
            for i in range(n):
                row32[i] = source[i]
        else:
            row16 = u16[base : base + n]
            if code == 1:
                for i in range(n):
                    row16[i] = float32_to_float16_bits(source[i])
            else:
                for i in range(n):
                    row16[i] = float32_to_bfloat16_bits(source[i])
    else:
        for i in range(n):
            store_real(f32, u16, code, base + i * step, source[i])
