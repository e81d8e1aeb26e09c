"""The row driver: kernels over operators that reduce over one dimension
(RMS normalisation, softmax) and write rows of the same length.

A tensor of shape ``(..., cols)`` is walked as `rows` rows of `cols`
elements. The leading dimensions are coalesced (merged where every operand
is contiguous across them) and a row's start offset is computed from its
index, so any strides work without a per-row table. Rows keep their
row-major order, so a row index still tells the position within each
leading dimension (the causal mask uses it).

Every row operator runs through one driver (`row_kernels`): it splits the
rows into chunks (run in parallel above a size threshold), gives each chunk
a float scratch row, and calls the operator's row body (a module-level
`@helper`) with a 1-D view of each operand's row. A body reads each input
element before it writes the output element at the same position, so an
output may be its input element for element (in place). Operands whose
elements are adjacent along the row are compiled with a constant step of 1,
which lets LLVM vectorise the row loops.

The bodies live with their operators: `softmax_row` in `softmax.py`, the RMS
normalisation rows in `ops/rms_norm.py`, `ops/add_rms_norm.py` and
`ops/fused_add_rms_norm.py` (their shared passes in `norms.py`).
"""

from __future__ import annotations

import hashlib
from functools import cache

import numpy as np
from numba import prange

from infini.ops.core.geometry import AliasGuard, coalesce

from .binding import bound, do_nothing
from .dtype_io import identity, loader, storer
from .jit import helper, kernel
from .layout import staging_like
from .memory import STORAGE, KnownAddresses, element_array

# Elements per parallel chunk, and the size below which kernels run serially
# (waking the thread pool costs more than it saves on small tensors).
CHUNK_ELEMENTS = 16384
PARALLEL_THRESHOLD = 65536

# The most operands a row kernel takes; launches pad with empty operands.
OPERANDS = 5
_PAD_DTYPE = "uint8"


class RowLayout:
    """Rows x cols iteration over operands sharing the shape ``(..., cols)``.

    `operand_strides` holds each operand's strides (in elements) over that
    shape; an operand that broadcasts has stride 0 there.
    """

    def __init__(self, shape, operand_strides) -> None:
        shape = tuple(shape)
        self.cols = shape[-1] if shape else 1
        self.col_steps = tuple(
            (strides[-1] if shape else 0) for strides in operand_strides
        )
        leading, leading_strides = coalesce(
            shape[:-1], [tuple(strides[:-1]) for strides in operand_strides]
        )
        if not leading:
            leading, leading_strides = (1,), [(0,) for _ in operand_strides]
        self.rows = int(np.prod(leading, dtype=np.int64))
        self.numel = 0 if 0 in shape else self.rows * self.cols
        self.shape = np.array(leading, dtype=np.int64)
        self.strides = np.array(leading_strides, dtype=np.int64).reshape(
            len(operand_strides), len(leading)
        )
        if self.numel < PARALLEL_THRESHOLD or self.rows == 1:
            self.chunks = 1
        else:
            per_chunk = max(1, CHUNK_ELEMENTS // max(self.cols, 1))
            self.chunks = min(self.rows, -(-self.rows // per_chunk))


@helper
def row_offset(row, shape, strides, operand):
    """The start of row `row` in operand `operand` (row-major over `shape`)."""
    offset = 0
    for dim in range(shape.shape[0] - 1, -1, -1):
        size = shape[dim]
        offset += (row % size) * strides[operand, dim]
        row //= size
    return offset


@helper
def row_operand(at, operand, size, storage, load, store):
    """Operand `operand` in row `row`, where `at` is ``(addresses, steps,
    shape, strides, cols, row)``: ``(view, step, load, store)``, `view` a
    1-D array whose element ``j * step`` is the row's element `j`."""
    addresses, steps, shape, strides, cols, row = at
    step = steps[operand]
    start = addresses[operand] + row_offset(row, shape, strides, operand) * size
    view = element_array(start, (cols - 1) * step + 1, storage)
    return (view, step, load, store)


def compute_dtype(*dtypes: str) -> str:
    """float64 when any operand is float64, else float32."""
    return "float64" if "float64" in dtypes else "float32"


# The driver.


@cache
def row_kernels(body, dtypes: tuple, compute: str, fixed_steps: tuple, narrow):
    """Serial and parallel kernels running `body` over rows.

    `dtypes` are the operands' dtypes, `compute` the type of the scratch
    row, `fixed_steps` each operand's step along the row when it is known
    (0 or 1; -1 when it is passed at run time) and `narrow` a helper
    handed to `body` (a rounding applied to values read).

    The serial kernel takes ``(addresses, steps, first, last, cols, shape,
    strides, params)`` and runs rows `first` to `last`; the parallel one
    takes ``(addresses, steps, rows, chunks, cols, shape, strides,
    params)`` and runs `rows` rows in `chunks` parallel chunks. Addresses
    and steps come `OPERANDS` each. For each row they call
    ``body(operands, cols, row, params, scratch, narrow)`` where
    operand `k` is ``(view, step, load, store)``: its row, its step along
    it, and its element access helpers (16-bit floats load as float32 and
    store rounded from `compute`).
    """
    dtypes = tuple(dtypes) + (_PAD_DTYPE,) * (OPERANDS - len(dtypes))
    fixed_steps = tuple(fixed_steps) + (0,) * (OPERANDS - len(fixed_steps))
    s0, s1, s2, s3, s4 = (STORAGE[d] for d in dtypes)
    z0, z1, z2, z3, z4 = (np.dtype(STORAGE[d]).itemsize for d in dtypes)
    f0, f1, f2, f3, f4 = fixed_steps
    l0, l1, l2, l3, l4 = (loader(d) for d in dtypes)
    w0, w1, w2, w3, w4 = (storer(d, compute) for d in dtypes)
    scratch_type = np.float64 if compute == "float64" else np.float32

    def run_rows(addresses, steps, first, last, cols, shape, strides, params):
        steps = (
            f0 if f0 >= 0 else steps[0],
            f1 if f1 >= 0 else steps[1],
            f2 if f2 >= 0 else steps[2],
            f3 if f3 >= 0 else steps[3],
            f4 if f4 >= 0 else steps[4],
        )
        scratch = np.empty(cols, scratch_type)
        for row in range(first, last):
            at = (addresses, steps, shape, strides, cols, row)
            operands = (
                row_operand(at, 0, z0, s0, l0, w0),
                row_operand(at, 1, z1, s1, l1, w1),
                row_operand(at, 2, z2, s2, l2, w2),
                row_operand(at, 3, z3, s3, l3, w3),
                row_operand(at, 4, z4, s4, l4, w4),
            )
            body(operands, cols, row, params, scratch, narrow)

    # The parallel kernel calls the serial one per chunk (Numba's parallel
    # array analysis fails on the row bodies' tuples of arrays). It captures
    # that kernel, so the kernel's name must say what it computes: the disk
    # cache keys captured functions by name.
    key = repr(
        (
            _stable_name(body),
            dtypes,
            compute,
            fixed_steps,
            _stable_name(narrow),
        )
    )
    run_rows.__qualname__ = (
        f"row_kernels.run_rows_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    )
    # `reassoc` lets sums run in several partial sums (vector lanes), which
    # is faster and no less accurate than one running sum. No `nnan`: the
    # bodies keep NaN and infinity semantics.
    serial = kernel(run_rows, fastmath={"reassoc", "contract"})

    def run_chunks(addresses, steps, rows, chunks, cols, shape, strides, params):
        for chunk in prange(chunks):
            first = chunk * rows // chunks
            last = (chunk + 1) * rows // chunks
            serial(addresses, steps, first, last, cols, shape, strides, params)

    return serial, kernel(run_chunks, parallel=True)


def _stable_name(function) -> str:
    function = getattr(function, "py_func", function)
    return f"{function.__module__}.{function.__qualname__}"


class RowOperand:
    """A tensor taking part in a row kernel: its metadata, its strides over
    the kernel's shape (0 where it broadcasts) and whether it is written."""

    def __init__(self, meta, strides, written: bool = False) -> None:
        self.meta = meta
        self.strides = tuple(strides)
        self.written = written


class RowLaunch:
    """A planned row kernel over operands of one shape ``(..., cols)``.

    Written operands that overlap another operand in any way but exactly
    (same address, strides and dtype) are computed into a staging buffer
    and copied back, so inputs are always read before they are
    overwritten; `in_place` lists written operands that are also read
    (their own memory is not a conflict).
    """

    def __init__(
        self, body, shape, operands, params, narrow=identity, compute=None
    ) -> None:
        self.layout = layout = RowLayout(shape, [o.strides for o in operands])
        dtypes = tuple(o.meta.dtype for o in operands)
        compute = compute or compute_dtype(*dtypes)
        # Two layout classes per kernel, so that few kernels compile: rows
        # whose elements are adjacent (or broadcast) get their steps built
        # in; any other layout passes every step at run time.
        steps = layout.col_steps
        if all(step in (0, 1) for step in steps):
            fixed = tuple(steps)
        else:
            fixed = (-1,) * len(steps)
        serial, parallel = row_kernels(body, dtypes, compute, fixed, narrow)
        if layout.chunks > 1:
            self.kernel, self.extent = parallel, (layout.rows, layout.chunks)
        else:
            self.kernel, self.extent = serial, (0, layout.rows)
        padding = OPERANDS - len(operands)
        self.steps = tuple(layout.col_steps) + (0,) * padding
        self.strides = np.vstack(
            [layout.strides, np.zeros((padding, layout.strides.shape[1]), np.int64)]
        )
        self.padding = (0,) * padding
        self.params = tuple(params)
        # The kernel's arguments after the addresses.
        self.tail = (
            self.steps,
            *self.extent,
            layout.cols,
            layout.shape,
            self.strides,
            self.params,
        )
        # Operand addresses found to need no staging.
        self.unstaged = KnownAddresses()
        self.guards = []
        for index, operand in enumerate(operands):
            if not operand.written:
                continue
            others = [i for i in range(len(operands)) if i != index]
            # A broadcast operand (such as a weight) is read for every row,
            # so any overlap with it is a conflict: its strides never match.
            metas = [
                (operands[i].meta, operands[i].strides if 0 not in
                 operands[i].strides[:-1] else ())
                for i in others
            ]  # fmt: skip
            guard = AliasGuard(operand.meta, operand.strides, metas)
            self.guards.append((index, others, guard))

    def __call__(self, *tensors) -> None:
        if self.layout.numel == 0:
            return
        addresses = tuple([tensor.data_ptr() for tensor in tensors])
        if addresses in self.unstaged:
            self.kernel(addresses + self.padding, *self.tail)
            return
        targets = list(addresses)
        staged = []
        for index, others, guard in self.guards:
            if guard.needs_staging(addresses[index], [addresses[i] for i in others]):
                buffer = staging_like(tensors[index])
                staged.append((tensors[index], buffer))
                targets[index] = buffer.data_ptr()
        self.kernel(tuple(targets) + self.padding, *self.tail)
        for out, buffer in staged:
            out.copy_(buffer)
        if not staged:
            self.unstaged.remember(addresses)

    def bind(self, *tensors):
        """The launch on `tensors` with their addresses fixed (a recorded
        call's replay, `Operator.bind_launch`), or `None` where a written
        operand needs staging."""
        if self.layout.numel == 0:
            return do_nothing
        addresses = tuple([tensor.data_ptr() for tensor in tensors])
        for index, others, guard in self.guards:
            if guard.needs_staging(addresses[index], [addresses[i] for i in others]):
                return None
        return bound(self.kernel, addresses + self.padding, *self.tail)


def trailing_strides(meta, ndim: int) -> tuple:
    """The strides of a 1-D `meta` (a weight over the last dimension)
    broadcast to `ndim` dimensions."""
    return (0,) * (ndim - 1) + (meta.strides[0],)


# What the row bodies share (`softmax.py`, `norms.py`, the operators' files).
# An operand is ``(view, step, load, store)`` (`row_kernels`).
#
# The bodies re-read their inputs (hot in L1/L2 after the first pass) rather
# than copying the row into the scratch row: the extra store and load of a
# scratch pass made the normalisations up to 2x slower once the tensors
# outgrow L2. They use the scratch row only where a value cannot be read
# back exactly (the float32 exponentials of a 16-bit softmax).

# Elements per float32 partial sum: sums of longer rows add the block sums in
# float64, which bounds the rounding error of a sum whatever the row length
# while the block loops still run in full-width float32 vectors.
SUM_BLOCK = 2048


@helper
def unsigned(index):
    """`index` as an unsigned integer: indexing with it spares Numba's
    negative-index wraparound, which LLVM cannot prove unneeded in loops not
    starting at 0 and which there turns vector loads into gathers."""
    return np.uint64(index)


# Shapes that reach the serial and the parallel kernel with contiguous rows.
PRECOMPILED_SHAPES = ((4, 64), (64, 4096))


def precompile_calls(call) -> int:
    """Runs ``call(torch_dtype, shape)`` (one operator call on zero-filled
    contiguous tensors) for each precompiled dtype and shape, which compiles
    and caches the kernels that LLM-size calls reach; returns the number of
    calls."""
    import torch

    from .precompile import PRECOMPILED_DTYPES

    calls = 0
    for name in PRECOMPILED_DTYPES:
        for shape in PRECOMPILED_SHAPES:
            call(getattr(torch, name), shape)
            calls += 1
    return calls
