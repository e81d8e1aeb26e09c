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

On a CPU with AVX-512 BF16, a bfloat16 weight times bfloat16 rows runs on
`vdpbf16ps` instead (`bfloat16_dot_instructions`): each instruction
multiplies 32 values of each operand as they are and adds the products in
pairs to 16 float32 sums, where widening takes three instructions per
eight weights (one row times the SmolLM2 output head: 21.5 GB/s against
8.7 widening, one thread). The products of bfloat16 values are exact in
float32; the instruction rounds its sums to nearest even and reads
denormal inputs as zero.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from .binding import bound, do_nothing
from .dtype_io import loader, storer
from .jit import compiled_with, helper, kernel
from .memory import STORAGE, element_array
from .numeric import bfloat16_bits_to_float32, float16_bits_to_float32
from .vector_ir import (
    F32,
    I32,
    carried_loop,
    declare,
    float_total,
    i64,
    integers,
    load_vector,
)

# At most this many rows take these kernels: longer products amortise a
# float32 copy of the weight over their rows and run faster in BLAS.
MAX_ROWS = 32
# Where the CPU multiplies bfloat16 matrices natively (AVX-512 BF16, AMX),
# torch's bfloat16 matmul beats these kernels from five rows on (SmolLM2's
# projections, one thread: 8 rows 7.8-8.7 GB/s here against 13-14 in
# torch; 4 rows 16.5 against 14.5), so only up to this many take them.
BFLOAT16_MAX_ROWS = 4

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


def bfloat16_dot_instructions() -> bool:
    """Whether the kernels are compiled for an x86 CPU with `vdpbf16ps`
    (AVX-512 BF16; the kernels use its 64-byte form)."""
    return compiled_with("avx512bf16")


# Bfloat16 values per `vdpbf16ps` operand (a 64-byte vector).
_STEP = 32
_FLOATS = ir.VectorType(F32, _STEP // 2)
_WORDS = ir.VectorType(I32, _STEP // 2)


def _dot_steps(builder, weight, rows, sums, count, first, unroll):
    """Adds `count` (>= 0) runs of `unroll` steps, from step `first`, of
    ``rows[t] * weight`` to the running sums (``sums[t][u]``, one per row
    and unrolled step, so that each waits only on its own): returns the
    sums after them."""
    name = f"llvm.x86.avx512bf16.dpbf16ps.{16 * _STEP}"
    dot = declare(builder, name, _FLOATS, [_FLOATS, _WORDS, _WORDS])

    def run(index, flat):
        start = builder.mul(
            builder.add(first, builder.mul(index, i64(unroll))), i64(2 * _STEP)
        )
        flat = list(flat)
        for u in range(unroll):
            at = builder.add(start, i64(2 * _STEP * u))
            values = load_vector(builder, builder.add(weight, at), I32, _STEP // 2)
            for t, row in enumerate(rows):
                x = load_vector(builder, builder.add(row, at), I32, _STEP // 2)
                flat[t * unroll + u] = builder.call(
                    dot, [flat[t * unroll + u], x, values]
                )
        return flat

    flat = carried_loop(
        builder, count, "bf16_steps", [v for row in sums for v in row], run
    )
    return [flat[t * unroll : (t + 1) * unroll] for t in range(len(rows))]


def _bfloat16_dots(tokens: int):
    """An intrinsic ``dots(weight, x, row_bytes, steps, out)``: for each of
    `tokens` bfloat16 rows (from address `x`, `row_bytes` apart), the
    float32 sum of its first ``_STEP * steps`` values times the bfloat16
    values at `weight`, written to ``out[t]`` (float32 at address `out`).
    The weight's values are loaded once for all the rows."""
    unroll = 4 if tokens == 1 else 2

    @intrinsic
    def dots(typingctx, weight, x, row_bytes, steps, out):
        if not integers(weight, x, row_bytes, steps, out):
            return None

        def codegen(context, builder, signature, args):
            weight, x, row_bytes, steps, out = (
                context.cast(builder, value, value_type, types.int64)
                for value, value_type in zip(args, signature.args, strict=True)
            )
            rows = [
                builder.add(x, builder.mul(row_bytes, i64(t))) for t in range(tokens)
            ]
            zero = ir.Constant(_FLOATS, [0.0] * (_STEP // 2))
            sums = [[zero] * unroll for _ in range(tokens)]
            runs = builder.sdiv(steps, i64(unroll))
            sums = _dot_steps(builder, weight, rows, sums, runs, i64(0), unroll)
            # The steps left over, one at a time.
            done = builder.mul(runs, i64(unroll))
            last = _dot_steps(
                builder,
                weight,
                rows,
                [[row[0]] for row in sums],
                builder.sub(steps, done),
                done,
                1,
            )
            for t, (row, first) in enumerate(zip(sums, last, strict=True)):
                total = first[0]
                for value in row[1:]:
                    total = builder.fadd(total, value)
                pointer = builder.inttoptr(
                    builder.add(out, i64(4 * t)), F32.as_pointer()
                )
                builder.store(float_total(builder, total), pointer, align=4)
            return context.get_dummy_value()

        return types.void(weight, x, row_bytes, steps, out), codegen

    return dots


@cache
def bfloat16_dot_kernel():
    """`weight_rows_kernel`'s ``run`` for a bfloat16 weight and bfloat16
    rows on `vdpbf16ps` (`bfloat16_dot_instructions` must hold): the rows
    are copied into `scratch` as they are (so that `out` may overlap them),
    four rows share each pass over a weight row, and the values past the
    last whole step of `_STEP` are added one by one."""
    dots4, dots1 = _bfloat16_dots(4), _bfloat16_dots(1)
    store = storer("bfloat16")
    step = COLUMNS_PER_TASK

    def run(
        weight_address, weight_stride, x_address, x_stride, out_address,
        out_stride, tokens, columns, depth, scratch_address,
    ):  # fmt: skip
        source = element_array(x_address, (tokens - 1) * x_stride + depth, np.uint16)
        out = element_array(out_address, (tokens - 1) * out_stride + columns, np.uint16)
        x = element_array(scratch_address, tokens * depth, np.uint16)
        for token in range(tokens):
            for index in range(depth):
                x[token * depth + index] = source[token * x_stride + index]
        steps = depth // _STEP
        tail = _STEP * steps
        row_bytes = 2 * depth
        for task in prange((columns + step - 1) // step):
            sums = np.empty(4, np.float32)
            at = sums.ctypes.data
            for column in range(task * step, min(columns, (task + 1) * step)):
                address = weight_address + 2 * column * weight_stride
                weight = element_array(address, depth, np.uint16)
                first = 0
                while first < tokens:
                    count = min(4, tokens - first)
                    rows = scratch_address + first * row_bytes
                    if count == 4:
                        dots4(address, rows, row_bytes, steps, at)
                    else:
                        for t in range(count):
                            dots1(
                                address,
                                rows + t * row_bytes,
                                row_bytes,
                                steps,
                                at + 4 * t,
                            )
                    for t in range(count):
                        total = sums[t]
                        row = (first + t) * depth
                        for index in range(tail, depth):
                            total += bfloat16_bits_to_float32(
                                x[row + index]
                            ) * bfloat16_bits_to_float32(weight[index])
                        store(out, (first + t) * out_stride + column, total)
                    first += count
        return 0

    return kernel(run, parallel=True)


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
        if weight_dtype == io_dtype == "bfloat16" and bfloat16_dot_instructions():
            self.run = bfloat16_dot_kernel()
        else:
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
