"""Products of a few rows by a weight read in its own dtype: ``out[t, c] =
sum_i x[t, i] * weight[c, i]`` for ``x`` ``(tokens, depth)`` and
``weight`` ``(columns, depth)`` with unit stride along `depth` (`linear`'s
weight, `matmul`'s transposed operand), float32, bfloat16 or float16.

A decode step's projections: one to a few tokens against a weight read once
per call, so the product runs as fast as the weight streams from memory.
BLAS would pack (for 16 bits, widen) the whole weight on every call; here
each weight element is loaded once per four rows and widened in registers.
The kernel takes integer addresses (nothing to unbox per call), widens the
rows of `x` into a float32 scratch first (so `out` may overlap `x`), sums
in float32 and rounds each result once into `out`'s dtype: a 16-bit
decode product runs with no conversion pass and no temporary array around
it (through NumPy those cost more than the product at SmolLM2's shapes).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from .binding import bound, do_nothing
from .dtype_io import loader, storer
from .jit import helper, kernel
from .memory import STORAGE, element_array
from .numeric import bfloat16_bits_to_float32, float16_bits_to_float32

# At most this many rows take these kernels: longer products amortise a
# float32 copy of the weight over their rows and run faster in BLAS.
MAX_ROWS = 32

# Weight rows each parallel task multiplies: enough work per task to hide
# the scheduling, small enough to spread over the cores.
COLUMNS_PER_TASK = 64


@helper
def _float32_as_is(value):
    return value


# How a weight element becomes float32, and up to how many rows the kernel
# widens each element once per four rows in registers (one pass over the
# weight, as a decode step's few rows need) rather than once per weight row
# into a scratch row that all rows read. A float32 weight needs no widening.
WIDENING = {
    "bfloat16": (bfloat16_bits_to_float32, 4),
    "float16": (float16_bits_to_float32, 4),
    "float32": (_float32_as_is, MAX_ROWS),
}


def _rows_times_row(convert, store):
    @helper
    def rows_times_row(x, source, out, out_stride, column):
        """``out[t * out_stride + column] = x[t] @ convert(source)`` for the
        float32 rows `x` ``(tokens, depth)`` and one weight row `source`
        of `depth` elements. Four rows per pass: one load of each weight
        element feeds four products."""
        rows, depth = x.shape
        full = rows - rows % 4
        for row in range(0, full, 4):
            total0 = total1 = total2 = total3 = np.float32(0.0)
            for index in range(depth):
                value = convert(source[index])
                total0 += x[row, index] * value
                total1 += x[row + 1, index] * value
                total2 += x[row + 2, index] * value
                total3 += x[row + 3, index] * value
            store(out, row * out_stride + column, total0)
            store(out, (row + 1) * out_stride + column, total1)
            store(out, (row + 2) * out_stride + column, total2)
            store(out, (row + 3) * out_stride + column, total3)
        for row in range(full, rows):
            total = np.float32(0.0)
            for index in range(depth):
                total += x[row, index] * convert(source[index])
            store(out, row * out_stride + column, total)

    return rows_times_row


@cache
def weight_rows_kernel(weight_dtype: str, io_dtype: str):
    """``run(weight, weight_stride, x, x_stride, out, out_stride, tokens,
    columns, depth, scratch)``: the product into `out` (addresses as
    integers, strides in elements; `x` and `out` of `io_dtype`, `weight`
    of `weight_dtype`), parallel over tasks of `COLUMNS_PER_TASK` weight
    rows; `scratch` holds ``tokens * depth`` float32 values (compiled on
    first use, cached on disk)."""
    widen, direct_rows = WIDENING[weight_dtype]
    store = storer(io_dtype)
    direct = _rows_times_row(widen, store)
    scratched = _rows_times_row(_float32_as_is, store)
    load = loader(io_dtype)
    io_storage = STORAGE[io_dtype]
    weight_storage = STORAGE[weight_dtype]
    step = COLUMNS_PER_TASK
    weight_bytes = np.dtype(weight_storage).itemsize

    def run(
        weight_address, weight_stride, x_address, x_stride, out_address,
        out_stride, tokens, columns, depth, scratch_address,
    ):  # fmt: skip
        source = element_array(x_address, (tokens - 1) * x_stride + depth, io_storage)
        out = element_array(
            out_address, (tokens - 1) * out_stride + columns, io_storage
        )
        x = element_array(scratch_address, tokens * depth, np.float32).reshape(
            (tokens, depth)
        )
        for token in range(tokens):
            for index in range(depth):
                x[token, index] = load(source, token * x_stride + index)
        row_bytes = weight_stride * weight_bytes
        for task in prange((columns + step - 1) // step):
            last = min(columns, (task + 1) * step)
            if tokens <= direct_rows:
                for column in range(task * step, last):
                    weight = element_array(
                        weight_address + column * row_bytes, depth, weight_storage
                    )
                    direct(x, weight, out, out_stride, column)
                continue
            row = np.empty(depth, np.float32)
            for column in range(task * step, last):
                weight = element_array(
                    weight_address + column * row_bytes, depth, weight_storage
                )
                for index in range(depth):
                    row[index] = widen(weight[index])
                scratched(x, row, out, out_stride, column)
        return 0

    return kernel(run, parallel=True, fastmath={"reassoc", "contract"})


class WeightRowsPlan:
    """The launch of one product geometry: `tokens` rows of `io_dtype`
    (``x_stride`` apart) times a ``(columns, depth)`` weight of
    `weight_dtype` (``weight_stride`` apart) into `out` (``out_stride``
    apart), strides in elements, all with unit stride along the row."""

    def __init__(
        self,
        weight_dtype: str,
        io_dtype: str,
        tokens: int,
        columns: int,
        depth: int,
        strides: tuple[int, int, int],
    ) -> None:
        self.scratch = np.zeros(max(1, tokens * depth), np.float32)
        self.empty = tokens == 0 or columns == 0
        self.run = weight_rows_kernel(weight_dtype, io_dtype)
        self.weight_stride, self.x_stride, self.out_stride = strides
        self.tail = (tokens, columns, depth, self.scratch.ctypes.data)

    def bind(self, weight: int, x: int, out: int):
        """`launch` on these addresses, as a callable of no arguments."""
        if self.empty:
            return do_nothing
        return bound(
            self.run,
            weight,
            self.weight_stride,
            x,
            self.x_stride,
            out,
            self.out_stride,
            *self.tail,
        )

    def launch(self, weight: int, x: int, out: int) -> None:
        """Runs the product on the tensors at these addresses."""
        if not self.empty:
            self.run(
                weight,
                self.weight_stride,
                x,
                self.x_stride,
                out,
                self.out_stride,
                *self.tail,
            )
