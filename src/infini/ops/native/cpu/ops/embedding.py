"""CPU `embedding` (slot 0): a row gather, after an optional in-place
renormalisation of the selected rows (`max_norm`).

Indices are walked as rows of a coalesced index shape (any strides); each
row of `out` receives a bit-exact copy of the selected row of `weight`.
Both kernels check every index before writing anything.
"""

from __future__ import annotations

from functools import cache, partial

import numpy as np
from numba import prange

from infini.ops.base._indexing import index_error, unravel
from infini.ops.base.embedding import Embedding
from infini.ops.core.geometry import AliasGuard, coalesce, span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.binding import checked, do_nothing
from infini.ops.native.cpu.dtype_io import BITS_DTYPE, loader, storer
from infini.ops.native.cpu.jit import helper, kernel
from infini.ops.native.cpu.layout import staging_like
from infini.ops.native.cpu.memory import STORAGE, element_array
from infini.ops.native.cpu.numeric import (
    bfloat16_bits_to_float32,
    float16_bits_to_float32,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
)
from infini.ops.native.cpu.rows import row_offset

CHUNK_ELEMENTS = 32768
PARALLEL_THRESHOLD = 65536

# Positions in the `plan` array.
(
    ROWS,
    DIM,
    COUNT,
    INDEX_SPAN,
    OUT_SPAN,
    WEIGHT_SPAN,
    OUT_COLUMN,
    WEIGHT_ROW,
    WEIGHT_COLUMN,
    CHUNKS,
    PLAN_SIZE,
) = range(11)


@cache
def gather_kernels(element_size: int, index_dtype: str):
    """Serial and parallel kernels ``run(out, weight, indices, plan, shape,
    strides) -> int`` copying rows of `weight` (addresses; `shape` and
    `strides` walk the indices, operand 0 the index tensor and operand 1 the
    rows of `out`). They return -1, or the flat position of the first index
    outside ``[0, count)``, in which case nothing was written."""
    storage = STORAGE[BITS_DTYPE[element_size]]
    index_storage = STORAGE[index_dtype]

    def run(out_address, weight_address, index_address, plan, shape, strides):
        rows, dim, count = plan[ROWS], plan[DIM], plan[COUNT]
        index = element_array(index_address, plan[INDEX_SPAN], index_storage)
        out = element_array(out_address, plan[OUT_SPAN], storage)
        weight = element_array(weight_address, plan[WEIGHT_SPAN], storage)
        out_column = plan[OUT_COLUMN]
        weight_row, weight_column = plan[WEIGHT_ROW], plan[WEIGHT_COLUMN]
        chunks = plan[CHUNKS]
        for row in range(rows):
            selected = np.int64(index[row_offset(row, shape, strides, 0)])
            if selected < 0 or selected >= count:
                return row
        for chunk in prange(chunks):
            first = chunk * rows // chunks
            last = (chunk + 1) * rows // chunks
            for row in range(first, last):
                selected = np.int64(index[row_offset(row, shape, strides, 0)])
                # Unsigned indices skip Numba's negative-index wraparound, so
                # the copy vectorises.
                source = np.uint64(selected * weight_row)
                target = np.uint64(row_offset(row, shape, strides, 1))
                for j in range(dim):
                    out[target + np.uint64(j * out_column)] = weight[
                        source + np.uint64(j * weight_column)
                    ]
        return -1

    return kernel(run), kernel(run, parallel=True)


@helper
def _round_float16(value):
    return float16_bits_to_float32(float32_to_float16_bits(np.float32(value)))


@helper
def _round_bfloat16(value):
    return bfloat16_bits_to_float32(float32_to_bfloat16_bits(np.float32(value)))


@helper
def _round_float32(value):
    return np.float32(value)


@cache
def renorm_kernel(dtype: str, index_dtype: str):
    """``run(weight, indices, plan, shape, strides, max_norm, norm_type) -> int``:
    torch's `embedding_renorm_` over the distinct selected rows (serial:
    `max_norm` lookups are rare and small, so compile time matters more).
    Returns -1, or the flat position of the first bad index (nothing written
    then)."""
    load, store = loader(dtype), storer(dtype)
    storage = STORAGE[dtype]
    index_storage = STORAGE[index_dtype]
    # torch computes the norm and the scale in the weight's dtype.
    round_norm = {"float16": _round_float16, "bfloat16": _round_bfloat16}.get(
        dtype, _round_float32
    )

    def run(weight_address, index_address, plan, shape, strides, max_norm, norm_type):
        rows, dim, count = plan[ROWS], plan[DIM], plan[COUNT]
        index = element_array(index_address, plan[INDEX_SPAN], index_storage)
        weight = element_array(weight_address, plan[WEIGHT_SPAN], storage)
        weight_row, weight_column = plan[WEIGHT_ROW], plan[WEIGHT_COLUMN]
        selected = np.empty(rows, np.int64)
        for row in range(rows):
            value = np.int64(index[row_offset(row, shape, strides, 0)])
            if value < 0 or value >= count:
                return row
            selected[row] = value
        distinct = np.unique(selected)
        for k in range(distinct.shape[0]):
            base = distinct[k] * weight_row
            total = 0.0
            if norm_type == np.inf:
                for j in range(dim):
                    total = max(
                        total, abs(np.float64(load(weight, base + j * weight_column)))
                    )
                norm = total
            elif norm_type == -np.inf:
                total = np.inf
                for j in range(dim):
                    total = min(
                        total, abs(np.float64(load(weight, base + j * weight_column)))
                    )
                norm = total
            elif norm_type == 0.0:
                for j in range(dim):
                    if load(weight, base + j * weight_column) != 0:
                        total += 1.0
                norm = total
            elif norm_type == 2.0:
                for j in range(dim):
                    value = np.float64(load(weight, base + j * weight_column))
                    total += value * value
                norm = np.sqrt(total)
            else:
                for j in range(dim):
                    value = abs(np.float64(load(weight, base + j * weight_column)))
                    total += value**norm_type
                norm = total ** (1.0 / norm_type)
            norm = np.float64(round_norm(norm))
            if norm > max_norm:
                scale = round_norm(max_norm / (norm + 1e-7))
                for j in range(dim):
                    position = base + j * weight_column
                    store(weight, position, np.float32(load(weight, position)) * scale)
        return -1

    return kernel(run)


@implementation(operator="embedding", devices=("cpu",), slot=0)
class CpuEmbedding(Embedding):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        self.index_shape = input.shape
        shape, (index_strides, out_strides) = coalesce(
            input.shape, [input.strides, out.strides[:-1]]
        )
        if not shape:
            shape, index_strides, out_strides = (1,), (0,), (0,)
        rows = int(np.prod(shape, dtype=np.int64))
        dim = weight.shape[1]
        self.empty = input.numel == 0
        plan = np.zeros(PLAN_SIZE, dtype=np.int64)
        plan[ROWS], plan[DIM], plan[COUNT] = rows, dim, self.num_embeddings
        plan[INDEX_SPAN] = span(input.shape, input.strides)
        plan[OUT_SPAN] = span(out.shape, out.strides)
        plan[WEIGHT_SPAN] = span(weight.shape, weight.strides)
        plan[OUT_COLUMN] = out.strides[-1]
        plan[WEIGHT_ROW], plan[WEIGHT_COLUMN] = weight.strides
        if rows * dim < PARALLEL_THRESHOLD or rows == 1:
            chunks = 1
        else:
            per_chunk = max(1, CHUNK_ELEMENTS // max(dim, 1))
            chunks = min(rows, -(-rows // per_chunk))
        plan[CHUNKS] = chunks
        self.plan = plan
        self.shape = np.array(shape, dtype=np.int64)
        self.strides = np.array([index_strides, out_strides], dtype=np.int64)
        # The lookup's arguments after the addresses.
        self.tail = (plan, self.shape, self.strides)
        serial, parallel = gather_kernels(weight.element_size, input.dtype)
        self.gather = parallel if chunks > 1 else serial
        self.renorm = (
            None if self.max_norm is None else renorm_kernel(weight.dtype, input.dtype)
        )
        self.alias = AliasGuard(out, out.strides, [(weight, ()), (input, ())])

    def _raise_bad_index(self, input, flat: int):
        position = unravel(flat, self.index_shape)
        raise index_error(
            self,
            "input",
            position,
            int(input[position]),
            0,
            self.num_embeddings,
            "the rows of `weight`",
        )

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        weight_address, input_address = weight.data_ptr(), input.data_ptr()
        if self.renorm is not None:
            bad = self.renorm(
                weight_address,
                input_address,
                self.plan,
                self.shape,
                self.strides,
                self.max_norm,
                self.norm_type,
            )
            if bad >= 0:
                self._raise_bad_index(input, bad)
        out_address = out.data_ptr()
        target = out
        if self.alias.needs_staging(out_address, (weight_address, input_address)):
            target = staging_like(out)
            out_address = target.data_ptr()
        bad = self.gather(out_address, weight_address, input_address, *self.tail)
        if bad >= 0:
            self._raise_bad_index(input, bad)
        if target is not out:
            out.copy_(target)

    def bind_launch(self, stream, input, weight, out):
        if self.empty:
            return do_nothing
        weight_address, input_address = weight.data_ptr(), input.data_ptr()
        out_address = out.data_ptr()
        if self.renorm is not None or self.alias.needs_staging(
            out_address, (weight_address, input_address)
        ):
            return None
        return checked(
            self.gather,
            (out_address, weight_address, input_address, *self.tail),
            partial(self._raise_bad_index, input),
        )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the lookups (which depend only on the element size) for
        int32 and int64 indices, at decode and prefill sizes."""
        import torch

        import infini.ops

        calls = 0
        for dtype in (torch.float32, torch.bfloat16):
            weight = torch.zeros(64, 512, dtype=dtype)
            for index_dtype in (torch.int32, torch.int64):
                for tokens in (1, 512):
                    input = torch.zeros(tokens, dtype=index_dtype)
                    out = torch.empty(tokens, 512, dtype=dtype)
                    infini.ops.embedding(input, weight, out, implementation_index=0)
                    calls += 1
        return calls
