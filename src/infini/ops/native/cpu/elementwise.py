"""Shared machinery of elementwise kernels: broadcasting, dimension
coalescing, row plans, and per-dtype load/store helpers.

An elementwise operator over tensors of one output shape is planned once (when
the operator is built) into `rows` x `inner` elements: the innermost
coalesced dimension is walked with a constant stride per operand, and each row
starts at a precomputed offset per operand. Contiguous operands collapse to a
single row.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .jit import helper
from .memory import STORAGE, span
from .numeric import (
    bfloat16_bits_to_float32,
    float16_bits_to_float32,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
    float64_to_bfloat16_bits,
    float64_to_float16_bits,
)

# The type arithmetic runs in: float32 for 16-bit floats (upcast first, as the
# contract's references do), the dtype itself otherwise.
COMPUTE = {
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.float32,
    "bfloat16": np.float32,
    "float32": np.float32,
    "float64": np.float64,
    "bool": np.uint8,
}


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


def broadcast_strides(meta_shape, meta_strides, shape) -> tuple[int, ...]:
    """Strides of a tensor broadcast to `shape` (0 on broadcast dimensions)."""
    offset = len(shape) - len(meta_shape)
    strides = [0] * len(shape)
    for i, (size, stride) in enumerate(zip(meta_shape, meta_strides, strict=False)):
        strides[offset + i] = 0 if size == 1 and shape[offset + i] != 1 else stride
    return tuple(strides)


def broadcast_shape(*shapes) -> tuple[int, ...] | None:
    """The broadcast of `shapes`, or `None` when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(ndim):
        size = 1
        for shape in shapes:
            j = i - (ndim - len(shape))
            if j < 0:
                continue
            if shape[j] != 1:
                if size != 1 and size != shape[j]:
                    return None
                size = shape[j]
        result.append(size)
    return tuple(result)


class RowPlan:
    """Rows x inner iteration over tensors sharing one (broadcast) shape."""

    def __init__(self, shape, operand_strides) -> None:
        shape, operand_strides = coalesce(shape, operand_strides)
        self.numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if any(size == 0 for size in shape):
            self.numel = 0
        if not shape:
            shape, operand_strides = (1,), [(1,) for _ in operand_strides]
        self.inner = shape[-1]
        self.inner_strides = tuple(strides[-1] for strides in operand_strides)
        outer_shape = shape[:-1]
        self.rows = int(np.prod(outer_shape, dtype=np.int64)) if outer_shape else 1
        # Row start offsets: one int64 array per operand.
        offsets = []
        for strides in operand_strides:
            row_offsets = np.zeros(1, dtype=np.int64)
            for size, stride in zip(outer_shape, strides[:-1], strict=False):
                row_offsets = (
                    row_offsets[:, None] + np.arange(size, dtype=np.int64) * stride
                ).reshape(-1)
            offsets.append(row_offsets)
        self.row_offsets = np.stack(offsets) if offsets else np.zeros((0, 1), np.int64)
        self.spans = tuple(span(shape, strides) for strides in operand_strides)


def coalesce(shape, operand_strides):
    """Drops size-1 dimensions and merges dimensions that are contiguous in
    every operand, which turns most layouts into one or two dimensions."""
    dims = [i for i, size in enumerate(shape) if size != 1]
    if any(shape[i] == 0 for i in range(len(shape))):
        return (0,), [(1,) for _ in operand_strides]
    merged_shape: list[int] = []
    merged_strides: list[list[int]] = [[] for _ in operand_strides]
    for i in dims:
        if merged_shape and all(
            merged[-1] == strides[i] * shape[i]
            for merged, strides in zip(merged_strides, operand_strides, strict=False)
        ):
            merged_shape[-1] *= shape[i]
            for merged, strides in zip(merged_strides, operand_strides, strict=False):
                merged[-1] = strides[i]
        else:
            merged_shape.append(shape[i])
            for merged, strides in zip(merged_strides, operand_strides, strict=False):
                merged.append(strides[i])
    return tuple(merged_shape), [tuple(s) for s in merged_strides]


# Elements per parallel chunk, and the size below which kernels run serially
# (waking the thread pool costs more than it saves on small tensors).
CHUNK = 16384
PARALLEL_THRESHOLD = 65536


def chunking(plan: RowPlan) -> tuple[int, int]:
    """`(chunk_size, chunk_count)` for a plan: one chunk when small."""
    total = plan.rows * plan.inner
    if total < PARALLEL_THRESHOLD:
        return max(total, 1), 1
    return CHUNK, -(-total // CHUNK)


class AliasGuard:
    """Decides at launch time (when addresses are known) whether an output
    overlaps an input in a way that needs a staging buffer.

    Writing in place is safe when the output and the input are the same
    elements in the same order (same address, strides and dtype); any other
    overlap, such as `relu(x, x.t())`, is computed into a buffer first.
    """

    def __init__(self, out_meta, out_strides, inputs) -> None:
        self.out_bytes = span(out_meta.shape, out_meta.strides) * out_meta.element_size
        self.inputs = []
        for meta, strides in inputs:
            nbytes = span(meta.shape, meta.strides) * meta.element_size
            same = strides == out_strides and meta.dtype == out_meta.dtype
            self.inputs.append((nbytes, same))

    def needs_staging(self, out_address: int, addresses) -> bool:
        out_end = out_address + self.out_bytes
        for address, (nbytes, same) in zip(addresses, self.inputs, strict=False):
            if address < out_end and out_address < address + nbytes:
                if not (same and address == out_address):
                    return True
        return False


def staging_like(out):
    """An uninitialised tensor with the layout of `out` (for staged writes)."""
    import torch

    return torch.empty_strided(
        out.shape, out.stride(), dtype=out.dtype, device=out.device
    )


@cache
def binary_kernels(combine, a_dtype: str, b_dtype: str, out_dtype: str, compute: str):
    """Serial and parallel kernels computing
    `out = combine(a, b, scalar)` elementwise over a `RowPlan` of three
    operands (out, a, b)."""
    from numba import prange

    from .jit import kernel
    from .memory import element_array

    load_a, load_b = loader(a_dtype), loader(b_dtype)
    store = storer(out_dtype, compute)
    a_storage, b_storage, out_storage = (
        STORAGE[a_dtype],
        STORAGE[b_dtype],
        STORAGE[out_dtype],
    )
    compute_type = COMPUTE[compute] if compute in COMPUTE else getattr(np, compute)

    def run(
        out_address,
        a_address,
        b_address,
        out_span,
        a_span,
        b_span,
        inner,
        offsets,
        out_step,
        a_step,
        b_step,
        chunk_size,
        chunks,
        total,
        scalar,
    ):
        o = element_array(out_address, out_span, out_storage)
        a = element_array(a_address, a_span, a_storage)
        b = element_array(b_address, b_span, b_storage)
        value = compute_type(scalar)
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            row = start // inner
            first = start - row * inner
            while start < stop:
                count = min(inner - first, stop - start)
                out_base = offsets[0, row]
                a_base = offsets[1, row]
                b_base = offsets[2, row]
                for i in range(first, first + count):
                    store(
                        o,
                        out_base + i * out_step,
                        combine(
                            compute_type(load_a(a, a_base + i * a_step)),
                            compute_type(load_b(b, b_base + i * b_step)),
                            value,
                        ),
                    )
                start += count
                row += 1
                first = 0

    return kernel(run), kernel(run, parallel=True)


@helper
def identity(value):
    return value


# Unsigned storage types by element size: copies move bit patterns, so one
# kernel per size serves every dtype (and keeps NaN payloads intact).
BITS_DTYPE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


@cache
def unary_kernels(transform, in_dtype: str, out_dtype: str, compute: str):
    """Serial and parallel kernels computing `out = transform(input)`
    elementwise over a `RowPlan` of two operands (out, input).

    Each element is loaded as `in_dtype` (16-bit floats widened to float32),
    converted to `compute`'s type (`COMPUTE`), passed through `transform` (a
    module-level `@helper`) and stored as `out_dtype` (16-bit floats rounded
    to nearest even, `bool` as 0/1, other types converted as C does).
    """
    from numba import prange

    from .jit import kernel
    from .memory import element_array

    load = loader(in_dtype)
    store = storer(out_dtype, compute)
    in_storage, out_storage = STORAGE[in_dtype], STORAGE[out_dtype]
    compute_type = COMPUTE[compute]

    def run(
        out_address,
        in_address,
        out_span,
        in_span,
        inner,
        offsets,
        out_step,
        in_step,
        chunk_size,
        chunks,
        total,
    ):
        o = element_array(out_address, out_span, out_storage)
        x = element_array(in_address, in_span, in_storage)
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            row = start // inner
            first = start - row * inner
            while start < stop:
                count = min(inner - first, stop - start)
                out_base = offsets[0, row]
                in_base = offsets[1, row]
                for i in range(first, first + count):
                    store(
                        o,
                        out_base + i * out_step,
                        transform(compute_type(load(x, in_base + i * in_step))),
                    )
                start += count
                row += 1
                first = 0

    return kernel(run), kernel(run, parallel=True)


def copy_kernels(element_size: int):
    """`unary_kernels` that copy elements of `element_size` bytes verbatim."""
    bits = BITS_DTYPE[element_size]
    return unary_kernels(identity, bits, bits, bits)


class UnaryLaunch:
    """One planned `unary_kernels` pass over tensors of one shape: the row
    plan, the serial or parallel kernel, and the arguments they take."""

    def __init__(self, shape, out_strides, in_strides, kernels) -> None:
        self.plan = plan = RowPlan(shape, [tuple(out_strides), tuple(in_strides)])
        self.numel = plan.numel
        self.chunk_size, self.chunks = chunking(plan)
        serial, parallel = kernels
        self.kernel = parallel if self.chunks > 1 else serial
        self.total = plan.rows * plan.inner

    def __call__(self, out_address: int, in_address: int) -> None:
        if self.numel == 0:
            return
        plan = self.plan
        spans, steps = plan.spans, plan.inner_strides
        self.kernel(
            out_address,
            in_address,
            spans[0],
            spans[1],
            plan.inner,
            plan.row_offsets,
            steps[0],
            steps[1],
            self.chunk_size,
            self.chunks,
            self.total,
        )


@cache
def flat_binary_kernels(combine, dtype: str):
    """Serial and parallel kernels for the common case of three contiguous
    operands of one dtype: `out[i] = combine(a[i], b[i], scalar)`. Fewer
    arguments than `binary_kernels` make the call itself cheaper, which is
    most of the cost for small tensors."""
    from numba import prange

    from .jit import kernel
    from .memory import element_array

    load, store = loader(dtype), storer(dtype, dtype)
    storage = STORAGE[dtype]
    compute_type = COMPUTE[dtype]

    def run(out_address, a_address, b_address, total, chunk_size, chunks, scalar):
        o = element_array(out_address, total, storage)
        a = element_array(a_address, total, storage)
        b = element_array(b_address, total, storage)
        value = compute_type(scalar)
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            for i in range(start, stop):
                store(
                    o,
                    i,
                    combine(compute_type(load(a, i)), compute_type(load(b, i)), value),
                )

    return kernel(run), kernel(run, parallel=True)


class BinaryElementwise:
    """A planned `out = combine(input, other, scalar)` over tensors of one
    dtype, `input` and `other` broadcast to `out`'s shape.

    Builds the row plan, picks the flat kernel when all three operands are
    contiguous with the same layout, and stages the result when `out`
    overlaps an input in any way other than exactly (see `AliasGuard`).
    """

    def __init__(self, combine, out, input, other, scalar) -> None:
        shape = out.shape
        strides = [
            out.strides,
            broadcast_strides(input.shape, input.strides, shape),
            broadcast_strides(other.shape, other.strides, shape),
        ]
        self.plan = plan = RowPlan(shape, strides)
        self.numel = plan.numel
        self.chunk_size, self.chunks = chunking(plan)
        self.total = plan.rows * plan.inner
        self.scalar = scalar
        dtype = out.dtype
        self.flat = plan.rows == 1 and plan.inner_strides == (1, 1, 1)
        kernels = (
            flat_binary_kernels(combine, dtype)
            if self.flat
            else binary_kernels(combine, dtype, dtype, dtype, dtype)
        )
        self.kernel = kernels[1] if self.chunks > 1 else kernels[0]
        # Byte extents for the overlap test, and whether an input may be
        # written in place (same elements in the same order as `out`).
        size = out.element_size
        self.out_bytes = plan.spans[0] * size
        self.input_bytes = plan.spans[1] * size
        self.other_bytes = plan.spans[2] * size
        self.input_in_place = strides[1] == tuple(out.strides)
        self.other_in_place = strides[2] == tuple(out.strides)

    def __call__(self, stream, input, other, out) -> None:
        # The signature of `Operator.launch`: implementations bind an instance
        # as their `launch`, which saves a call layer on the hot path.
        if self.numel == 0:
            return
        self.run(out, input.data_ptr(), other.data_ptr())

    def run(self, out, input_address: int, other_address: int) -> None:
        """The launch on input addresses (operands may be views that are not
        tensors of their own, such as the halves of `silu_and_mul`'s input)."""
        if self.numel == 0:
            return
        out_address = out.data_ptr()
        out_end = out_address + self.out_bytes
        staged = None
        if (
            input_address < out_end
            and out_address < input_address + self.input_bytes
            and not (self.input_in_place and input_address == out_address)
        ) or (
            other_address < out_end
            and out_address < other_address + self.other_bytes
            and not (self.other_in_place and other_address == out_address)
        ):
            staged = staging_like(out)
            out_address = staged.data_ptr()
        if self.flat:
            self.kernel(
                out_address,
                input_address,
                other_address,
                self.total,
                self.chunk_size,
                self.chunks,
                self.scalar,
            )
        else:
            plan = self.plan
            spans, steps = plan.spans, plan.inner_strides
            self.kernel(
                out_address,
                input_address,
                other_address,
                spans[0],
                spans[1],
                spans[2],
                plan.inner,
                plan.row_offsets,
                steps[0],
                steps[1],
                steps[2],
                self.chunk_size,
                self.chunks,
                self.total,
                self.scalar,
            )
        if staged is not None:
            out.copy_(staged)
