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

from infini.ops.core.geometry import (  # noqa: F401 (re-used by the CPU kernels)
    AliasGuard,
    broadcast_shape,
    broadcast_strides,
    coalesce,
)

from .jit import helper
from .memory import STORAGE, span, streaming_threshold
from .numeric import (
    bfloat16_bits_to_float32,
    float16_bits_to_float32,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
    float64_to_bfloat16_bits,
    float64_to_float16_bits,
)
from .precompile import STREAMED_SHAPE, run_streamed

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


class RowPlan:
    """Rows x inner iteration over tensors sharing one (broadcast) shape.

    Dimensions are first ordered by the first operand's strides (largest
    outermost), so that the inner loop walks the output with its smallest
    stride whatever the layout (a column-major output is written along its
    columns); then size-1 dimensions are dropped and contiguous ones merged.
    """

    def __init__(self, shape, operand_strides) -> None:
        shape, operand_strides = _order_by_first(tuple(shape), operand_strides)
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
        order = None
        if self.rows * self.inner >= ROW_TILE_MIN_ELEMENTS:
            order = _tiled_row_order(outer_shape, operand_strides, self.inner_strides)
        if order is not None:
            self.row_offsets = self.row_offsets[:, order]
        self.spans = tuple(span(shape, strides) for strides in operand_strides)


# Elements of the read-side block a tiled row order keeps in cache.
ROW_TILE_ELEMENTS = 16384
# Tensors below this many elements sit in the L2 cache whatever the order
# (and measured a little slower tiled).
ROW_TILE_MIN_ELEMENTS = 1 << 20


def _tiled_row_order(outer_shape, operand_strides, inner_strides):
    """A row order that visits the two innermost outer dimensions in tiles,
    or `None` to keep row-major order.

    Rows are ordered by the output's strides, so when another operand has
    those two dimensions the other way round (a ``(tokens, heads, head)``
    tensor copied into a heads-major one), walking rows in order reads that
    operand one row per page. Tiles of `tile` rows along the inner outer
    dimension keep the rows it reads in cache until the neighbouring rows
    (the next heads) use them, while the output still gets runs of `tile`
    consecutive rows. Only for rows contiguous in every operand: strided
    rows go to the tiled kernels instead.
    """
    if len(outer_shape) < 2 or any(step != 1 for step in inner_strides):
        return None
    slow, fast = outer_shape[-2], outer_shape[-1]
    swapped = [
        abs(strides[-2])
        for strides in operand_strides[1:]
        if abs(strides[-3]) < abs(strides[-2])
    ]
    if not swapped:
        return None
    tile = max(1, ROW_TILE_ELEMENTS // max(swapped))
    if tile >= fast:
        return None
    grid = np.arange(int(np.prod(outer_shape)), dtype=np.int64).reshape(-1, slow, fast)
    prefix = grid.shape[0]
    parts = [
        grid[:, :, start : start + tile].reshape(prefix, -1)
        for start in range(0, fast, tile)
    ]
    return np.concatenate(parts, axis=1).reshape(-1)


def _order_by_first(shape, operand_strides):
    """`shape` and the strides permuted so that the first operand's strides
    decrease (stable: ties keep their order, so row-major stays as is)."""
    if not operand_strides or len(shape) < 2:
        return shape, [tuple(s) for s in operand_strides]
    first = operand_strides[0]
    order = sorted(range(len(shape)), key=lambda i: -first[i])
    if order == list(range(len(shape))):
        return shape, [tuple(s) for s in operand_strides]
    return (
        tuple(shape[i] for i in order),
        [tuple(strides[i] for i in order) for strides in operand_strides],
    )


# Output dtypes a streaming kernel may write: stored as they are computed
# (16-bit floats and `bool` are rounded or normalised by their storers).
STREAMABLE_DTYPES = frozenset(
    ("float32", "float64", "int32", "int64", "uint32", "uint64")
)


def streams(dtype: str, nbytes: int) -> bool:
    """Whether an output of `dtype` in an operation moving `nbytes` bytes
    is written with streaming stores (it would not stay in the cache)."""
    return dtype in STREAMABLE_DTYPES and nbytes > streaming_threshold()


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


def _launch_nothing(*arguments) -> None:
    """The launch of an empty plan."""


def staging_like(out):
    """An uninitialised tensor with the layout of `out` (for staged writes)."""
    import torch

    return torch.empty_strided(
        out.shape, out.stride(), dtype=out.dtype, device=out.device
    )


# Kernels. Every factory returns Numba dispatchers (compiled on first call,
# cached on disk), always a serial and a parallel (`prange`) variant. Loops
# index from zero over slices where the data is contiguous, which lets LLVM
# vectorise them; strided loops index with unsigned integers, which spares
# Numba's negative-index wraparound test on every element.


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
        contiguous = out_step == 1 and a_step == 1 and b_step == 1
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            row = start // inner
            first = start - row * inner
            while start < stop:
                count = min(inner - first, stop - start)
                out_base = offsets[0, row] + first * out_step
                a_base = offsets[1, row] + first * a_step
                b_base = offsets[2, row] + first * b_step
                if contiguous:
                    oc = o[out_base : out_base + count]
                    ac = a[a_base : a_base + count]
                    bc = b[b_base : b_base + count]
                    for i in range(count):
                        store(
                            oc,
                            i,
                            combine(
                                compute_type(load_a(ac, i)),
                                compute_type(load_b(bc, i)),
                                value,
                            ),
                        )
                else:
                    ob, ab, bb = (
                        np.uint64(out_base),
                        np.uint64(a_base),
                        np.uint64(b_base),
                    )
                    os, as_, bs = (
                        np.uint64(out_step),
                        np.uint64(a_step),
                        np.uint64(b_step),
                    )
                    for i in range(count):
                        j = np.uint64(i)
                        store(
                            o,
                            ob + j * os,
                            combine(
                                compute_type(load_a(a, ab + j * as_)),
                                compute_type(load_b(b, bb + j * bs)),
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


# Tiles of the tiled unary kernels: rows x columns of the row plan. When the
# input is walked with a large stride (a transposed source), the rows of a
# tile read neighbouring elements, so each cache line (and page) fetched for
# one row serves the next ones too instead of being evicted before they run.
# Tall and narrow: with power-of-two strides the lines of the columns share
# one cache set, so few columns keep them within its ways (measured on a
# (2048, 4096) transpose: 256 x 8 runs 4x faster than 32 x 64 tiles).
TILE_ROWS = 256
TILE_COLUMNS = 8
# Input strides (in elements) from which `UnaryLaunch` tiles a strided plan.
TILED_MIN_STEP = 16

# Unsigned storage types by element size: copies move bit patterns, so one
# kernel per size serves every dtype (and keeps NaN payloads intact).
BITS_DTYPE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


@cache
def unary_kernels(transform, in_dtype: str, out_dtype: str, compute: str):
    """Kernels computing `out = transform(input)` elementwise: `(serial,
    parallel)` over a `RowPlan` of two operands (out, input), then `(serial,
    parallel)` for two contiguous operands, then `(serial, parallel)` over
    the same plan in tiles (`UnaryLaunch` picks one).

    Each element is loaded as `in_dtype` (16-bit floats widened to float32),
    converted to `compute`'s type (`COMPUTE`), passed through `transform` (a
    module-level `@helper`) and stored as `out_dtype` (16-bit floats rounded
    to nearest even, `bool` as 0/1, other types converted as C does).
    """
    from numba import prange

    from .jit import kernel
    from .memory import (
        element_array,
        no_fence,
        store_streaming,
        streaming_fence,
    )

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
        contiguous = out_step == 1 and in_step == 1
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            row = start // inner
            first = start - row * inner
            while start < stop:
                count = min(inner - first, stop - start)
                out_base = offsets[0, row] + first * out_step
                in_base = offsets[1, row] + first * in_step
                if contiguous:
                    oc = o[out_base : out_base + count]
                    xc = x[in_base : in_base + count]
                    for i in range(count):
                        store(oc, i, transform(compute_type(load(xc, i))))
                else:
                    ob, ib = np.uint64(out_base), np.uint64(in_base)
                    os, is_ = np.uint64(out_step), np.uint64(in_step)
                    for i in range(count):
                        j = np.uint64(i)
                        store(
                            o,
                            ob + j * os,
                            transform(compute_type(load(x, ib + j * is_))),
                        )
                start += count
                row += 1
                first = 0

    def flat_kernel(write, finish):
        """The flat kernel storing with `write`; each chunk ends with
        `finish`."""

        def flat(out_address, in_address, total, chunk_size, chunks):
            o = element_array(out_address, total, out_storage)
            x = element_array(in_address, total, in_storage)
            for chunk in prange(chunks):
                start = chunk * chunk_size
                stop = min(start + chunk_size, total)
                oc = o[start:stop]
                xc = x[start:stop]
                for i in range(stop - start):
                    write(oc, i, transform(compute_type(load(xc, i))))
                finish()

        return flat

    flat = flat_kernel(store, no_fence)
    flat_streaming = flat_kernel(store_streaming, streaming_fence)

    def tiled(
        out_address,
        in_address,
        out_span,
        in_span,
        rows,
        inner,
        offsets,
        out_step,
        in_step,
        tiles,
    ):
        o = element_array(out_address, out_span, out_storage)
        x = element_array(in_address, in_span, in_storage)
        os, is_ = np.uint64(out_step), np.uint64(in_step)
        column_tiles = (inner + TILE_COLUMNS - 1) // TILE_COLUMNS
        for tile in prange(tiles):
            row_tile = tile // column_tiles
            first_row = row_tile * TILE_ROWS
            last_row = min(first_row + TILE_ROWS, rows)
            first = (tile - row_tile * column_tiles) * TILE_COLUMNS
            count = min(TILE_COLUMNS, inner - first)
            for row in range(first_row, last_row):
                ob = np.uint64(offsets[0, row] + first * out_step)
                ib = np.uint64(offsets[1, row] + first * in_step)
                for i in range(count):
                    j = np.uint64(i)
                    store(
                        o, ob + j * os, transform(compute_type(load(x, ib + j * is_)))
                    )

    return (
        kernel(run),
        kernel(run, parallel=True),
        kernel(flat),
        kernel(flat, parallel=True),
        kernel(tiled),
        kernel(tiled, parallel=True),
        kernel(flat_streaming, parallel=True),
    )


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


class UnaryLaunch:
    """One planned `unary_kernels` pass over tensors of one shape: the row
    plan, the kernel (the flat one when both operands are contiguous alike),
    and the arguments it takes. Calls take the two data addresses."""

    def __init__(
        self, shape, out_strides, in_strides, kernels, streaming: bool = False
    ) -> None:
        self.plan = plan = RowPlan(shape, [tuple(out_strides), tuple(in_strides)])
        self.numel = plan.numel
        self.chunk_size, self.chunks = chunking(plan)
        self.total = plan.rows * plan.inner
        self.flat = plan.rows == 1 and plan.inner_strides == (1, 1)
        parallel = self.chunks > 1
        # Tiles where the input's inner stride skips cache lines and its rows
        # start close together (a transpose), so that tiles reuse lines.
        self.tiles = 0
        if (
            plan.rows > 1
            and abs(plan.inner_strides[1]) >= TILED_MIN_STEP
            and abs(int(plan.row_offsets[1, 1] - plan.row_offsets[1, 0]))
            < TILED_MIN_STEP
        ):
            self.tiles = -(-plan.rows // TILE_ROWS) * -(-plan.inner // TILE_COLUMNS)
        if self.flat:
            self.kernel = kernels[3] if parallel else kernels[2]
            if parallel and streaming:
                self.kernel = kernels[6]
        elif self.tiles:
            self.kernel = kernels[5] if parallel and self.tiles > 1 else kernels[4]
        else:
            self.kernel = kernels[1] if parallel else kernels[0]

    def __call__(self, out_address: int, in_address: int) -> None:
        if self.numel == 0:
            return
        if self.flat:
            self.kernel(
                out_address, in_address, self.total, self.chunk_size, self.chunks
            )
            return
        plan = self.plan
        if self.tiles:
            self.kernel(
                out_address,
                in_address,
                plan.spans[0],
                plan.spans[1],
                plan.rows,
                plan.inner,
                plan.row_offsets,
                plan.inner_strides[0],
                plan.inner_strides[1],
                self.tiles,
            )
            return
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


class UnaryElementwise:
    """A planned `out = transform(input)` (a `unary_kernels` family) with
    `input` broadcast to `out`'s shape; stages the result when `out`
    overlaps `input` other than element for element (same addresses, same
    element size), so results are as if `input` were read first.

    An instance is the implementation's `launch`: ``(stream, input, out)``.
    """

    def __init__(self, out, input, kernels, streaming: bool = False) -> None:
        in_strides = broadcast_strides(input.shape, input.strides, out.shape)
        numel = int(np.prod(out.shape, dtype=np.int64))
        nbytes = numel * (out.element_size + input.element_size)
        self.pass_ = UnaryLaunch(
            out.shape,
            out.strides,
            in_strides,
            kernels,
            streaming=streaming and streams(out.dtype, nbytes),
        )
        self.numel = self.pass_.numel
        spans = self.pass_.plan.spans
        self.out_bytes = spans[0] * out.element_size
        self.input_bytes = spans[1] * input.element_size
        self.in_place = (
            tuple(in_strides) == tuple(out.strides)
            and input.element_size == out.element_size
        )
        self.launch = self._make_launch()

    def __call__(self, stream, input, out) -> None:
        if self.numel == 0:
            return
        self.run(out, input.data_ptr())

    def _make_launch(self):
        """`(stream, input, out)` for this plan, with its constants bound in
        a closure: on small tensors the Python around the kernel call costs
        as much as the kernel, and each attribute lookup counts."""
        if self.numel == 0:
            return _launch_nothing
        run = self.run
        out_bytes, input_bytes, in_place = (
            self.out_bytes,
            self.input_bytes,
            self.in_place,
        )
        pass_ = self.pass_
        if not pass_.flat:

            def launch(stream, input, out):
                run(out, input.data_ptr())

            return launch
        kernel, total = pass_.kernel, pass_.total
        chunk_size, chunks = pass_.chunk_size, pass_.chunks

        def launch_flat(stream, input, out):
            out_address = out.data_ptr()
            input_address = input.data_ptr()
            if (
                input_address < out_address + out_bytes
                and out_address < input_address + input_bytes
                and not (in_place and input_address == out_address)
            ):
                run(out, input_address)
            else:
                kernel(out_address, input_address, total, chunk_size, chunks)

        return launch_flat

    def run(self, out, input_address: int) -> None:
        """The launch on an input address (an input may be a view that is no
        tensor of its own)."""
        if self.numel == 0:
            return
        out_address = out.data_ptr()
        if (
            input_address < out_address + self.out_bytes
            and out_address < input_address + self.input_bytes
            and not (self.in_place and input_address == out_address)
        ):
            staged = staging_like(out)
            self.pass_(staged.data_ptr(), input_address)
            out.copy_(staged)
        else:
            self.pass_(out_address, input_address)


@cache
def fill_kernels(bits: str):
    """Kernels storing one `bits` pattern (an unsigned type of the element
    size) into every element of a one-operand `RowPlan`: `(serial, parallel)`
    strided, then `(serial, parallel)` contiguous."""
    from numba import prange

    from .jit import kernel
    from .memory import element_array

    storage = STORAGE[bits]

    def run(
        out_address, out_span, inner, offsets, step, chunk_size, chunks, total, value
    ):
        o = element_array(out_address, out_span, storage)
        pattern = storage(value)
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            row = start // inner
            first = start - row * inner
            while start < stop:
                count = min(inner - first, stop - start)
                base = offsets[0, row] + first * step
                if step == 1:
                    oc = o[base : base + count]
                    for i in range(count):
                        oc[i] = pattern
                else:
                    ob, os = np.uint64(base), np.uint64(step)
                    for i in range(count):
                        o[ob + np.uint64(i) * os] = pattern
                start += count
                row += 1
                first = 0

    def flat(out_address, total, chunk_size, chunks, value):
        o = element_array(out_address, total, storage)
        pattern = storage(value)
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            oc = o[start:stop]
            for i in range(stop - start):
                oc[i] = pattern

    return (
        kernel(run),
        kernel(run, parallel=True),
        kernel(flat),
        kernel(flat, parallel=True),
    )


class FillLaunch:
    """Writes one bit pattern into every element of tensors laid out as
    `out`; `value` is the pattern as a `numpy.uint64` (see `bits_of`)."""

    def __init__(self, out) -> None:
        self.plan = plan = RowPlan(out.shape, [tuple(out.strides)])
        self.numel = plan.numel
        self.chunk_size, self.chunks = chunking(plan)
        self.total = plan.rows * plan.inner
        self.flat = plan.rows == 1 and plan.inner_strides == (1,)
        kernels = fill_kernels(BITS_DTYPE[out.element_size])
        parallel = self.chunks > 1
        if self.flat:
            self.kernel = kernels[3] if parallel else kernels[2]
        else:
            self.kernel = kernels[1] if parallel else kernels[0]

    def __call__(self, out_address: int, value) -> None:
        if self.numel == 0:
            return
        if self.flat:
            self.kernel(out_address, self.total, self.chunk_size, self.chunks, value)
            return
        plan = self.plan
        self.kernel(
            out_address,
            plan.spans[0],
            plan.inner,
            plan.row_offsets,
            plan.inner_strides[0],
            self.chunk_size,
            self.chunks,
            self.total,
            value,
        )


def bits_of(tensor) -> np.uint64:
    """The bit pattern of the single element of `tensor` (a torch tensor),
    zero-extended (one kernel signature whatever the pattern)."""
    import torch

    size = tensor.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    return np.uint64(int(tensor.reshape(1).view(view)[0]) % (1 << (8 * size)))


@cache
def flat_binary_kernels(combine, dtype: str):
    """Serial and parallel kernels for the common case of three contiguous
    operands of one dtype: `out[i] = combine(a[i], b[i], scalar)`. Fewer
    arguments than `binary_kernels` make the call itself cheaper, which is
    most of the cost for small tensors."""
    from numba import prange

    from .jit import kernel
    from .memory import (
        element_array,
        no_fence,
        store_streaming,
        streaming_fence,
    )

    load, store = loader(dtype), storer(dtype, dtype)
    storage = STORAGE[dtype]
    compute_type = COMPUTE[dtype]

    def flat_run(write, finish):
        """The kernel storing with `write`; each chunk ends with `finish`."""

        def run(out_address, a_address, b_address, total, chunk_size, chunks, scalar):
            o = element_array(out_address, total, storage)
            a = element_array(a_address, total, storage)
            b = element_array(b_address, total, storage)
            value = compute_type(scalar)
            for chunk in prange(chunks):
                start = chunk * chunk_size
                stop = min(start + chunk_size, total)
                oc = o[start:stop]
                ac = a[start:stop]
                bc = b[start:stop]
                for i in range(stop - start):
                    write(
                        oc,
                        i,
                        combine(
                            compute_type(load(ac, i)), compute_type(load(bc, i)), value
                        ),
                    )
                finish()

        return run

    run = flat_run(store, no_fence)
    run_streaming = flat_run(store_streaming, streaming_fence)

    return kernel(run), kernel(run, parallel=True), kernel(run_streaming, parallel=True)


class BinaryElementwise:
    """A planned `out = combine(input, other, scalar)` over tensors of one
    dtype, `input` and `other` broadcast to `out`'s shape.

    Builds the row plan, picks the flat kernel when all three operands are
    contiguous with the same layout, and stages the result when `out`
    overlaps an input in any way other than exactly (see `AliasGuard`).
    """

    def __init__(
        self, combine, out, input, other, scalar, streaming: bool = False
    ) -> None:
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
        if (
            streaming
            and self.flat
            and self.chunks > 1
            and streams(dtype, 3 * self.numel * out.element_size)
        ):
            self.kernel = kernels[2]
        # Byte extents for the overlap test, and whether an input may be
        # written in place (same elements in the same order as `out`).
        size = out.element_size
        self.out_bytes = plan.spans[0] * size
        self.input_bytes = plan.spans[1] * size
        self.other_bytes = plan.spans[2] * size
        self.input_in_place = strides[1] == tuple(out.strides)
        self.other_in_place = strides[2] == tuple(out.strides)
        self.launch = self._make_launch()

    def _make_launch(self):
        """`(stream, input, other, out)` for this plan (see
        `UnaryElementwise._make_launch`)."""
        if self.numel == 0:
            return _launch_nothing
        run = self.run
        if not self.flat:

            def launch(stream, input, other, out):
                run(out, input.data_ptr(), other.data_ptr())

            return launch
        kernel, total, scalar = self.kernel, self.total, self.scalar
        chunk_size, chunks = self.chunk_size, self.chunks
        out_bytes, input_bytes, other_bytes = (
            self.out_bytes,
            self.input_bytes,
            self.other_bytes,
        )
        input_in_place, other_in_place = self.input_in_place, self.other_in_place

        def launch_flat(stream, input, other, out):
            out_address = out.data_ptr()
            input_address = input.data_ptr()
            other_address = other.data_ptr()
            out_end = out_address + out_bytes
            if (
                input_address < out_end
                and out_address < input_address + input_bytes
                and not (input_in_place and input_address == out_address)
            ) or (
                other_address < out_end
                and out_address < other_address + other_bytes
                and not (other_in_place and other_address == out_address)
            ):
                run(out, input_address, other_address)
            else:
                kernel(
                    out_address,
                    input_address,
                    other_address,
                    total,
                    chunk_size,
                    chunks,
                    scalar,
                )

        return launch_flat

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


def precompile_unary_elementwise(operator: str, dtypes, *scalars) -> int:
    """Runs `infini.ops.<operator>(input, *scalars, out)` once per dtype on
    each layout class the unary kernels distinguish (small and large
    contiguous, strided), compiling and caching those kernels; returns the
    number of calls made."""
    import torch

    import infini.ops

    function = getattr(infini.ops, operator)
    calls = 0
    for name in dtypes:
        dtype = getattr(torch, name)
        for shape, transpose in (((8,), False), ((512, 256), False), ((8, 8), True)):
            input = torch.zeros(shape, dtype=dtype)
            out = torch.empty(shape, dtype=dtype)
            if transpose:
                input = input.t()
            function(input, *scalars, out, implementation_index=0)
            calls += 1
        input = torch.zeros(STREAMED_SHAPE, dtype=dtype)
        run_streamed(operator, input, *scalars, torch.empty_like(input))
        calls += 1
    return calls
