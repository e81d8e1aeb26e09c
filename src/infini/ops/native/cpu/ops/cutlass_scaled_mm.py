"""CPU `cutlass_scaled_mm` (slot 0): a tiled int8 product with the scales
and the bias applied as each tile's int32 sums are done.

Each tile multiplies up to 4 rows of `a` by 4 columns of `b`, both read as
rows contiguous along `k` (`b` is the transpose of an ``(n, k)`` weight, as
vLLM passes it; other layouts are packed into that one first). On x86-64
with AVX-512 VNNI the tile is LLVM IR calling `vpdpbusd` (64 byte products
summed into 16 int32 lanes per instruction); elsewhere it is a plain loop
that LLVM vectorises. `vpdpbusd` multiplies unsigned by signed bytes, so the
tile flips the sign bit of `b` (``b + 128`` as unsigned) and the kernel
subtracts ``128 * sum(a[i, :])`` from each sum afterwards: exact, since
int32 arithmetic wraps.
"""

from __future__ import annotations

from functools import cache

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from infini.ops.base.cutlass_scaled_mm import CutlassScaledMm, vector_stride
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.dtype_io import loader, storer
from infini.ops.native.cpu.jit import compiled_with, helper, kernel
from infini.ops.native.cpu.memory import STORAGE, element_array
from infini.ops.native.cpu.numeric import fma_float32
from infini.ops.native.cpu.vector_ir import carried_loop

# Bytes of `k` one `vpdpbusd` consumes per row.
CHUNK = 64
# Rows of `a` a task sweeps per pass over its columns of `b`: 64 rows of a
# 4096-wide `a` (256 KiB) stay in the level-2 cache while the task's
# columns are walked.
ROW_BLOCK = 64
# Columns of `b` per parallel task, at most: with 4096-wide rows a block is
# 256 KiB of weight, read once per row block.
MAX_COLUMN_BLOCK = 64


def int8_dot_instructions() -> bool:
    """Whether the kernels are compiled for a CPU with AVX-512 VNNI (and
    AVX-512 BW), the instructions the fast tile uses."""
    return compiled_with("avx512vnni", "avx512bw")


def _vnni_tile(rows: int, columns: int):
    """An intrinsic ``tile(a_address, a_stride, b_address, b_stride, chunks,
    out_address)`` storing the ``rows x columns`` int32 sums of ``a_row[p] *
    (b_row[p] + 128)`` over ``p < 64 * chunks`` at `out_address`, row-major.
    Rows are `a_stride` (`b_stride`) bytes apart."""

    @intrinsic
    def tile(typingctx, a_address, a_stride, b_address, b_stride, chunks, out_address):
        signature = types.void(*[types.int64] * 6)

        def codegen(context, builder, signature, args):
            a_base, a_step, b_base, b_step, count, out_base = args
            byte = ir.IntType(8)
            word = ir.IntType(32)
            index = ir.IntType(64)
            bytes64 = ir.VectorType(byte, CHUNK)
            words16 = ir.VectorType(word, CHUNK // 4)
            dot = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(words16, [words16] * 3),
                "llvm.x86.avx512.vpdpbusd.512",
            )
            reduce = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(word, [words16]),
                "llvm.vector.reduce.add.v16i32",
            )
            zero = ir.Constant(words16, None)
            sign = ir.Constant(bytes64, [0x80] * CHUNK)

            def row_pointers(base, step, number):
                return [
                    builder.inttoptr(
                        builder.add(base, builder.mul(step, index(row))),
                        byte.as_pointer(),
                    )
                    for row in range(number)
                ]

            a_rows = row_pointers(a_base, a_step, rows)
            b_rows = row_pointers(b_base, b_step, columns)

            def run(chunk, sums):
                offset = builder.mul(chunk, index(CHUNK))

                def load(pointer):
                    address = builder.gep(pointer, [offset])
                    return builder.load(
                        builder.bitcast(address, bytes64.as_pointer()), align=1
                    )

                a_values = [builder.bitcast(load(p), words16) for p in a_rows]
                b_values = [
                    builder.bitcast(builder.xor(load(p), sign), words16) for p in b_rows
                ]
                return [
                    builder.call(dot, [sums[r * columns + c], b_values[c], a_values[r]])
                    for r in range(rows)
                    for c in range(columns)
                ]

            finals = carried_loop(
                builder, count, "tile", [zero] * (rows * columns), run
            )
            out = builder.inttoptr(out_base, word.as_pointer())
            for position, final in enumerate(finals):
                total = builder.call(reduce, [final])
                builder.store(total, builder.gep(out, [index(position)]))
            return context.get_dummy_value()

        return signature, codegen

    return tile


_tile_4x4 = _vnni_tile(4, 4)
_tile_3x4 = _vnni_tile(3, 4)
_tile_2x4 = _vnni_tile(2, 4)
_tile_1x4 = _vnni_tile(1, 4)
_tile_1x1 = _vnni_tile(1, 1)


@helper
def vnni_tile(
    a, a_address, a_row, a_stride, b, b_address, b_row, b_stride, rows, columns,
    chunks, k, sums,
):  # fmt: skip
    """Sums over the first ``64 * chunks`` bytes of `k` into `sums` (``rows *
    columns``, row-major), each biased by ``128 * sum(a row)``."""
    a_start = np.int64(a_address + a_row * a_stride)
    b_start = np.int64(b_address + b_row * b_stride)
    a_step = np.int64(a_stride)
    b_step = np.int64(b_stride)
    out = np.int64(sums.ctypes.data)
    count = np.int64(chunks)
    if columns == 4:
        if rows == 4:
            _tile_4x4(a_start, a_step, b_start, b_step, count, out)
        elif rows == 3:
            _tile_3x4(a_start, a_step, b_start, b_step, count, out)
        elif rows == 2:
            _tile_2x4(a_start, a_step, b_start, b_step, count, out)
        else:
            _tile_1x4(a_start, a_step, b_start, b_step, count, out)
    else:
        _tile_1x1(a_start, a_step, b_start, b_step, count, out)


@helper
def plain_tile(
    a, a_address, a_row, a_stride, b, b_address, b_row, b_stride, rows, columns,
    chunks, k, sums,
):  # fmt: skip
    """The exact int32 sums over all of `k` into `sums` (``rows * columns``,
    row-major), in loops LLVM vectorises. Truncating every step to int32
    keeps the arithmetic 32-bit (Numba widens int32 sums to int64)."""
    for r in range(rows):
        a_start = (a_row + r) * a_stride
        if columns == 4:
            b0 = b_row * b_stride
            b1 = b0 + b_stride
            b2 = b1 + b_stride
            b3 = b2 + b_stride
            total0 = total1 = total2 = total3 = np.int32(0)
            for p in range(k):
                value = np.int32(a[a_start + p])
                total0 = np.int32(total0 + value * np.int32(b[b0 + p]))
                total1 = np.int32(total1 + value * np.int32(b[b1 + p]))
                total2 = np.int32(total2 + value * np.int32(b[b2 + p]))
                total3 = np.int32(total3 + value * np.int32(b[b3 + p]))
            sums[4 * r] = total0
            sums[4 * r + 1] = total1
            sums[4 * r + 2] = total2
            sums[4 * r + 3] = total3
        else:
            b0 = b_row * b_stride
            total = np.int32(0)
            for p in range(k):
                total = np.int32(total + np.int32(a[a_start + p]) * np.int32(b[b0 + p]))
            sums[r] = total


@cache
def scaled_mm_kernel(out_dtype: str, vnni: bool):
    """``run(out, ..., m, n, k, column_block)`` on addresses and strides in
    elements; `a` and `b` (the ``(n, k)`` transpose) have unit stride along
    `k`."""
    storage = STORAGE[out_dtype]
    load = loader(out_dtype)
    store = storer(out_dtype)
    tile = vnni_tile if vnni else plain_tile
    chunk_bytes = CHUNK if vnni else 0
    row_block = ROW_BLOCK

    @kernel(parallel=True)
    def run(
        out_address, out_row, out_column, a_address, a_stride, b_address,
        b_stride, scale_a_address, scale_a_stride, scale_b_address,
        scale_b_stride, bias_address, bias_stride, has_bias, m, n, k,
        column_block,
    ):  # fmt: skip
        a = element_array(a_address, (m - 1) * a_stride + k, np.int8)
        b = element_array(b_address, (n - 1) * b_stride + k, np.int8)
        out = element_array(
            out_address, (m - 1) * out_row + (n - 1) * out_column + 1, storage
        )
        scale_a = element_array(
            scale_a_address, (m - 1) * scale_a_stride + 1, np.float32
        )
        scale_b = element_array(
            scale_b_address, (n - 1) * scale_b_stride + 1, np.float32
        )
        bias = element_array(
            bias_address, (n - 1) * bias_stride + 1 if has_bias else 0, storage
        )
        # The sign-flip bias of each row's sums (zero for the plain tile).
        offsets = np.zeros(m, np.int32)
        chunks = k // chunk_bytes if chunk_bytes else 0
        if chunk_bytes:
            for i in prange(m):
                total = np.int32(0)
                start = i * a_stride
                for p in range(chunks * chunk_bytes):
                    total = np.int32(total + np.int32(a[start + p]))
                offsets[i] = np.int32(128) * total
        # The tile covers `k` up to `covered`; the rest is summed here.
        covered = chunks * chunk_bytes if chunk_bytes else k
        blocks = (n + column_block - 1) // column_block
        for block in prange(blocks):
            sums = np.empty(16, np.int32)
            j_first = block * column_block
            j_last = min(n, j_first + column_block)
            for i_first in range(0, m, row_block):
                i_last = min(m, i_first + row_block)
                j = j_first
                while j < j_last:
                    columns = 4 if j + 4 <= j_last else 1
                    i = i_first
                    while i < i_last:
                        rows = min(4, i_last - i) if columns == 4 else 1
                        tile(
                            a, a_address, i, a_stride, b, b_address, j, b_stride,
                            rows, columns, chunks, k, sums,
                        )  # fmt: skip
                        for r in range(rows):
                            row = i + r
                            a_start = row * a_stride
                            row_scale = scale_a[row * scale_a_stride]
                            for c in range(columns):
                                column = j + c
                                b_start = column * b_stride
                                total = np.int32(sums[r * columns + c] - offsets[row])
                                for p in range(covered, k):
                                    total = np.int32(
                                        total
                                        + np.int32(a[a_start + p])
                                        * np.int32(b[b_start + p])
                                    )
                                scaled = scale_b[column * scale_b_stride] * np.float32(
                                    total
                                )
                                if has_bias:
                                    value = fma_float32(
                                        row_scale,
                                        scaled,
                                        load(bias, column * bias_stride),
                                    )
                                else:
                                    value = row_scale * scaled
                                store(out, row * out_row + column * out_column, value)
                        i += rows
                    j += columns
        return 0

    return run


@kernel(parallel=True)
def pack_rows(target_address, source_address, rows, columns, row_stride, column_stride):
    """Copies an int8 ``(rows, columns)`` view with any strides into a packed
    row-major buffer."""
    target = element_array(target_address, rows * columns, np.int8)
    source = element_array(
        source_address,
        (rows - 1) * row_stride + (columns - 1) * column_stride + 1,
        np.int8,
    )
    for row in prange(rows):
        for column in range(columns):
            target[row * columns + column] = source[
                row * row_stride + column * column_stride
            ]
    return 0


@cache
def scatter_kernel(out_dtype: str):
    """Copies a packed ``(m, n)`` result into `out`'s strides."""
    storage = STORAGE[out_dtype]

    @kernel
    def run(out_address, out_row, out_column, source_address, m, n):
        out = element_array(
            out_address, (m - 1) * out_row + (n - 1) * out_column + 1, storage
        )
        source = element_array(source_address, m * n, storage)
        for i in range(m):
            for j in range(n):
                out[i * out_row + j * out_column] = source[i * n + j]
        return 0

    return run


def _extent(meta) -> tuple[int, int]:
    """The byte range ``[first, last)`` a tensor reaches from its address."""
    if meta.numel == 0:
        return 0, 0
    return 0, span(meta.shape, meta.strides) * meta.element_size


@implementation(operator="cutlass_scaled_mm", devices=("cpu",), slot=0)
class CpuCutlassScaledMm(CutlassScaledMm):
    def __init__(self, args) -> None:
        super().__init__(args)
        m, k, n = self.m, self.k, self.n
        a, b, out = args.a, args.b, args.out
        self.empty = m == 0 or n == 0
        # `a` rows and `b` columns (rows of the transpose) must be unit
        # stride along `k`; other layouts are packed.
        self.pack_a = k > 1 and a.strides[1] != 1
        self.pack_b = k > 1 and b.strides[0] != 1
        self.a_stride = k if self.pack_a else a.strides[0]
        self.b_stride = k if self.pack_b else b.strides[1]
        self.a_strides = a.strides
        self.b_strides = b.strides
        self.a_buffer = np.empty(m * k if self.pack_a else 0, np.int8)
        self.b_buffer = np.empty(n * k if self.pack_b else 0, np.int8)
        self.out_strides = out.strides
        self.scale_a_stride = vector_stride(args.scale_a)
        self.scale_b_stride = vector_stride(args.scale_b)
        self.bias_stride = 0 if args.bias is None else vector_stride(args.bias)
        self.has_bias = args.bias is not None
        threads = numba.get_num_threads()
        # Four blocks per thread balance the load; a block holds whole tiles.
        block = n // (4 * threads) // 4 * 4
        self.column_block = max(4, min(MAX_COLUMN_BLOCK, block))
        self.run = scaled_mm_kernel(self.out_dtype, int8_dot_instructions())
        self.scatter = scatter_kernel(self.out_dtype)
        self.out_extent = _extent(out)
        self.input_extents = [
            _extent(meta) for meta in (a, b, args.scale_a, args.scale_b, args.bias)
            if meta is not None
        ]  # fmt: skip
        self.staging = np.empty(m * n, STORAGE[self.out_dtype])

    def _overlaps(self, out, inputs) -> bool:
        low = out.data_ptr() + self.out_extent[0]
        high = out.data_ptr() + self.out_extent[1]
        for tensor, (first, last) in zip(inputs, self.input_extents):
            start = tensor.data_ptr()
            if start + first < high and low < start + last and first < last:
                return True
        return False

    def launch(self, stream, a, b, scale_a, scale_b, bias, out) -> None:
        if self.empty:
            return
        m, k, n = self.m, self.k, self.n
        a_address = a.data_ptr()
        b_address = b.data_ptr()
        if self.pack_a:
            pack_rows(self.a_buffer.ctypes.data, a_address, m, k, *self.a_strides)
            a_address = self.a_buffer.ctypes.data
        if self.pack_b:
            # The transpose of `b`: row `j` is column `j` of `b`.
            row_stride, column_stride = self.b_strides[1], self.b_strides[0]
            pack_rows(
                self.b_buffer.ctypes.data, b_address, n, k, row_stride, column_stride
            )
            b_address = self.b_buffer.ctypes.data
        inputs = [t for t in (a, b, scale_a, scale_b, bias) if t is not None]
        staged = self._overlaps(out, inputs)
        if staged:
            out_address, out_row, out_column = self.staging.ctypes.data, n, 1
        else:
            out_address = out.data_ptr()
            out_row, out_column = self.out_strides
        self.run(
            out_address, out_row, out_column, a_address, self.a_stride,
            b_address, self.b_stride, scale_a.data_ptr(), self.scale_a_stride,
            scale_b.data_ptr(), self.scale_b_stride,
            bias.data_ptr() if self.has_bias else 0, self.bias_stride,
            self.has_bias, m, n, k, self.column_block,
        )  # fmt: skip
        if staged:
            self.scatter(out.data_ptr(), *self.out_strides, out_address, m, n)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each output dtype (with and without a
        bias, packed and in-place operands, and the staged output)."""
        import torch

        import infini.ops
        from infini.ops.base.cutlass_scaled_mm import SCALED_MM_OUT_DTYPES

        calls = 0
        a = torch.ones(5, 70, dtype=torch.int8)
        weight = torch.ones(6, 70, dtype=torch.int8)
        scale = torch.ones(1)
        for name in SCALED_MM_OUT_DTYPES:
            dtype = getattr(torch, name)
            out = torch.empty(5, 6, dtype=dtype)
            bias = torch.zeros(6, dtype=dtype)
            for b, bias_or_none in (
                (weight.t(), bias),
                (weight.t().contiguous(), None),
            ):
                infini.ops.cutlass_scaled_mm(
                    a, b, scale, scale, bias_or_none, dtype, out, implementation_index=0
                )
                calls += 1
            # A bias in `out`'s memory: the result is staged, then scattered.
            infini.ops.cutlass_scaled_mm(
                a, weight.t(), scale, scale, out[0], dtype, out, implementation_index=0
            )
            calls += 1
        return calls
