"""The unary and binary elementwise kernels and their launches.

`unary_kernels` computes ``out = transform(input)`` and `binary_kernels` /
`flat_binary_kernels` compute ``out = combine(a, b, scalar)`` over an
`ElementwisePlan` (`layout.py`); `transform` and `combine` are module-level
`@helper` functions (`activations.py`, the operators' files). A launch
(`UnaryLaunch`, `UnaryElementwise`, `BinaryElementwise`) is planned once per
geometry when an operator is built and picks the kernel for the layout: flat
when every operand is contiguous alike, tiled for transposed inputs, strided
otherwise, each serial or parallel by size.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from infini.ops.core.geometry import broadcast_strides
from infini.ops.core.tensor import TensorMeta

from .binding import bound, do_nothing
from .dtype_io import COMPUTE, loader, storer
from .layout import (
    ACTIVATION_COST,
    ElementwisePlan,
    chunking,
    staging_like,
    streams,
)
from .memory import STORAGE


def _launch_nothing(*arguments) -> None:
    """The launch of an empty plan."""


# Kernels. Every factory returns Numba dispatchers (compiled on first call,
# cached on disk), always a serial and a parallel (`prange`) variant. Loops
# index from zero over slices where the data is contiguous, which lets LLVM
# vectorise them; strided loops index with unsigned integers, which spares
# Numba's negative-index wraparound test on every element.

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


@cache
def unary_kernels(transform, in_dtype: str, out_dtype: str, compute: str):
    """Kernels computing `out = transform(input)` elementwise: `(serial,
    parallel)` over a `ElementwisePlan` of two operands (out, input), then `(serial,
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


class UnaryLaunch:
    """One planned `unary_kernels` pass over tensors of one shape: the row
    plan, the kernel (the flat one when both operands are contiguous alike),
    and the arguments it takes. Calls take the two data addresses."""

    def __init__(
        self, shape, out_strides, in_strides, kernels, streaming: bool = False
    ) -> None:
        self.plan = plan = ElementwisePlan(
            shape, [tuple(out_strides), tuple(in_strides)]
        )
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
def binary_kernels(combine, a_dtype: str, b_dtype: str, out_dtype: str, compute: str):
    """Serial and parallel kernels computing
    `out = combine(a, b, scalar)` elementwise over a `ElementwisePlan` of three
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
        self, combine, out, input, other, scalar, streaming: bool = False, cost=1
    ) -> None:
        shape = out.shape
        strides = [
            out.strides,
            broadcast_strides(input.shape, input.strides, shape),
            broadcast_strides(other.shape, other.strides, shape),
        ]
        self.plan = plan = ElementwisePlan(shape, strides)
        self.numel = plan.numel
        self.chunk_size, self.chunks = chunking(plan, cost)
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
        staged = None
        if self._overlaps(out_address, input_address, other_address):
            staged = staging_like(out)
            out_address = staged.data_ptr()
        self.kernel(*self._arguments(out_address, input_address, other_address))
        if staged is not None:
            out.copy_(staged)

    def bind(self, out_address: int, input_address: int, other_address: int):
        """`run` with its addresses fixed (`Operator.bind_launch`), or `None`
        where the result needs staging."""
        if self.numel == 0:
            return do_nothing
        if self._overlaps(out_address, input_address, other_address):
            return None
        return bound(
            self.kernel, *self._arguments(out_address, input_address, other_address)
        )

    def _overlaps(self, out_address, input_address, other_address) -> bool:
        """Whether `out` overlaps an input other than exactly in place."""
        out_end = out_address + self.out_bytes
        return (
            input_address < out_end
            and out_address < input_address + self.input_bytes
            and not (self.input_in_place and input_address == out_address)
        ) or (
            other_address < out_end
            and out_address < other_address + self.other_bytes
            and not (self.other_in_place and other_address == out_address)
        )

    def _arguments(self, out_address, input_address, other_address) -> tuple:
        """The kernel's arguments."""
        if self.flat:
            return (
                out_address,
                input_address,
                other_address,
                self.total,
                self.chunk_size,
                self.chunks,
                self.scalar,
            )
        plan = self.plan
        spans, steps = plan.spans, plan.inner_strides
        return (
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


class GatedElementwise:
    """``out = combine(input[..., :h], input[..., h:], 0.0)`` with ``h`` the
    last dimension of `out`: the gated activations (`silu_and_mul`,
    `gelu_tanh_and_mul`). The instance is the operator's `launch`
    (``launch(stream, input, out)``).

    Both halves are planned as tensors of `out`'s shape with `input`'s
    strides; the second starts ``h`` elements further along the last
    dimension. `BinaryElementwise` stages the result when `out` overlaps
    `input`, so inputs are read first.
    """

    def __init__(self, combine, out, input) -> None:
        half = TensorMeta(out.shape, input.strides, input.dtype, input.device)
        self.second_offset = out.shape[-1] * input.strides[-1] * input.element_size
        self.elementwise = BinaryElementwise(
            combine, out, half, half, 0.0, cost=ACTIVATION_COST
        )

    def __call__(self, stream, input, out) -> None:
        first_address = input.data_ptr()
        self.elementwise.run(out, first_address, first_address + self.second_offset)

    def bind(self, stream, input, out):
        """The operator's `bind_launch`."""
        first_address = input.data_ptr()
        return self.elementwise.bind(
            out.data_ptr(), first_address, first_address + self.second_offset
        )
