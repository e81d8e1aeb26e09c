"""Row-wise kernels: operators that reduce over one dimension (RMS
normalisation, softmax) and write rows of the same length.

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
"""

from __future__ import annotations

import hashlib
from functools import cache

import numpy as np
from numba import prange, types
from numba.extending import overload

from .elementwise import AliasGuard, coalesce, loader, staging_like, storer
from .jit import helper, kernel
from .memory import STORAGE, element_array
from .numeric import (
    bits_float32,
    float16_bits_to_float32,
    float32_bits,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
)

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


# Scalar helpers the row bodies use.


@helper
def identity(value):
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


# `exp` in float32 without a library call, so that loops over it vectorise,
# for the arguments softmax has (``x - max(x)``: at most 0, or NaN):
# ``exp(x) = 2^k * exp(r)`` with ``k = rint(x / ln 2)`` and
# ``|r| <= ln(2) / 2``, `exp(r)` from a degree-6 polynomial fitted for
# relative error (1.9e-9, well under float32's half ulp; with float32
# rounding the result is within 2 ulps) and `2^k` built from its bits.
# Arguments are clamped at ``-127 ln 2``, where ``k = -127`` gives the bits
# of +0 for `2^k`: results that far below the normal range are 0 without a
# compare and select.
_LOG2E = np.float32(1.4426950408889634)
_LN2_HIGH = np.float32(0.693145751953125)
_LN2_LOW = np.float32(1.4286067653e-06)
_EXP_FLOOR = np.float32(-127 * 0.6931471805599453)
_EXP_C2 = np.float32(0.49999991059303284)
_EXP_C3 = np.float32(0.16666419804096222)
_EXP_C4 = np.float32(0.04166822507977486)
_EXP_C5 = np.float32(0.008374815806746483)
_EXP_C6 = np.float32(0.001383684459142387)


@helper
def exp_nonpositive_float32(x):
    """`exp(x)` in float32 for ``x <= 0`` within 2 ulps down to float32's
    smallest normal number (1.2e-38), 0 or a subnormal below it, and NaN for
    NaN. Without branches (a NaN is kept by a bit select), so that loops over
    it vectorise and Numba inlines it cleanly more than once."""
    clamped = max(x, _EXP_FLOOR)
    k = np.rint(clamped * _LOG2E)
    r = clamped - k * _LN2_HIGH - k * _LN2_LOW
    p = _EXP_C6 * r + _EXP_C5
    p = p * r + _EXP_C4
    p = p * r + _EXP_C3
    p = p * r + _EXP_C2
    p = p * r + np.float32(1)
    p = p * r + np.float32(1)
    power = bits_float32(np.uint32(np.int32(k) + np.int32(127)) << np.uint32(23))
    result = p * power
    nan_mask = np.uint32(0) - np.uint32(x != x)
    bits = (float32_bits(result) & ~nan_mask) | (float32_bits(x) & nan_mask)
    return bits_float32(bits)


def exp_nonpositive(x):
    """`exp(x)` for ``x <= 0`` in the type of `x`: `exp_nonpositive_float32`
    for float32, the library's `exp` for float64 (kernels only)."""
    raise NotImplementedError


@overload(exp_nonpositive, inline="always")
def _exp_nonpositive(x):
    if x == types.float64:
        return lambda x: np.exp(x)
    return lambda x: exp_nonpositive_float32(x)


# Maxima as integer maxima, which vectorise (a float maximum does not: its
# NaN rules make it order dependent). A float32's order key is its bit
# pattern with the magnitude bits flipped when negative: keys order as the
# values, and a (positive) NaN above `inf`, so that a NaN maximum still
# makes the row NaN. float64 values are their own keys.


def order_key(value):
    raise NotImplementedError


def key_value(key):
    raise NotImplementedError


@overload(order_key, inline="always")
def _order_key(value):
    if value == types.float64:
        return lambda value: value

    def key32(value):
        bits = np.int32(float32_bits(value))
        return np.int32(bits ^ ((bits >> np.int32(31)) & np.int32(0x7FFFFFFF)))

    return key32


@overload(key_value, inline="always")
def _key_value(key):
    if key == types.float64:
        return lambda key: key

    def value32(key):
        bits = np.int32(key ^ ((key >> np.int32(31)) & np.int32(0x7FFFFFFF)))
        return bits_float32(np.uint32(bits))

    return value32


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
        layout = self.layout
        if layout.numel == 0:
            return
        addresses = [tensor.data_ptr() for tensor in tensors]
        staged = []
        for index, others, guard in self.guards:
            if guard.needs_staging(addresses[index], [addresses[i] for i in others]):
                buffer = staging_like(tensors[index])
                staged.append((tensors[index], buffer))
                addresses[index] = buffer.data_ptr()
        self.kernel(
            tuple(addresses) + self.padding,
            self.steps,
            *self.extent,
            layout.cols,
            layout.shape,
            self.strides,
            self.params,
        )
        for out, buffer in staged:
            out.copy_(buffer)


def trailing_strides(meta, ndim: int) -> tuple:
    """The strides of a 1-D `meta` (a weight over the last dimension)
    broadcast to `ndim` dimensions."""
    return (0,) * (ndim - 1) + (meta.strides[0],)


# Row bodies. An operand is ``(view, step, load, store)`` (`row_kernels`).
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


@helper
def _sum_squares(source, cols, compute):
    """The sum of the squares of a row, in float64 over float32 blocks (in
    `compute`, the scratch row's type)."""
    view, step, load = source[0], source[1], source[2]
    total = 0.0
    for start in range(0, cols, SUM_BLOCK):
        partial = compute(0)
        for j in range(start, min(start + SUM_BLOCK, cols)):
            value = compute(load(view, unsigned(j * step)))
            partial += value * value
        total += partial
    return total


@helper
def _normalize(out, source, weight, cols, total, eps, compute):
    """``out = source / sqrt(total / cols + eps) * weight`` (`source` read
    again: it may be `out` itself, element for element)."""
    out_view, out_step, store_out = out[0], out[1], out[3]
    view, step, load = source[0], source[1], source[2]
    weight_view, weight_step, load_weight = weight[0], weight[1], weight[2]
    scale = compute(1.0 / np.sqrt(total / cols + eps))
    for j in range(cols):
        value = compute(load(view, j * step)) * compute(
            load_weight(weight_view, j * weight_step)
        )
        store_out(out_view, j * out_step, value * scale)


@helper
def _add_squares(a, b, sum_out, narrow, cols, compute):
    """Writes ``a + b`` to `sum_out`; returns the sum of the squares of
    the sums passed through `narrow`."""
    a_view, a_step, load_a = a[0], a[1], a[2]
    b_view, b_step, load_b = b[0], b[1], b[2]
    sum_view, sum_step, store_sum = sum_out[0], sum_out[1], sum_out[3]
    total = 0.0
    for start in range(0, cols, SUM_BLOCK):
        partial = compute(0)
        for j in range(start, min(start + SUM_BLOCK, cols)):
            value = compute(load_a(a_view, unsigned(j * a_step))) + compute(
                load_b(b_view, unsigned(j * b_step))
            )
            store_sum(sum_view, unsigned(j * sum_step), value)
            value = compute(narrow(value))
            partial += value * value
        total += partial
    return total


@helper
def _normalize_sum(out, a, b, weight, cols, total, eps, compute):
    """``out = (a + b) / sqrt(total / cols + eps) * weight``."""
    out_view, out_step, store_out = out[0], out[1], out[3]
    a_view, a_step, load_a = a[0], a[1], a[2]
    b_view, b_step, load_b = b[0], b[1], b[2]
    weight_view, weight_step, load_weight = weight[0], weight[1], weight[2]
    scale = compute(1.0 / np.sqrt(total / cols + eps))
    for j in range(cols):
        value = compute(load_a(a_view, j * a_step)) + compute(
            load_b(b_view, j * b_step)
        )
        value = value * compute(load_weight(weight_view, j * weight_step))
        store_out(out_view, j * out_step, value * scale)


@helper
def rms_norm_row(operands, cols, row, params, scratch, narrow):
    """Operands (out, input, weight); params (eps,)."""
    compute = scratch.dtype.type
    total = _sum_squares(operands[1], cols, compute)
    _normalize(operands[0], operands[1], operands[2], cols, total, params[0], compute)


@helper
def add_rms_norm_row(operands, cols, row, params, scratch, narrow):
    """Operands (out, residual_out, input, residual, weight); params (eps,
    read_back).

    The sum is normalised as computed (unrounded): with `read_back` it is
    read back from `residual_out` (which holds it exactly: it has the
    compute type), else computed again from the inputs, which then must not
    be `residual_out` (`add_rms_norm_scratch_row` serves that case)."""
    compute = scratch.dtype.type
    a, b, weight, eps = operands[2], operands[3], operands[4], params[0]
    total = _add_squares(a, b, operands[1], identity, cols, compute)
    if params[1]:
        _normalize(operands[0], operands[1], weight, cols, total, eps, compute)
    else:
        _normalize_sum(operands[0], a, b, weight, cols, total, eps, compute)


@helper
def add_rms_norm_scratch_row(operands, cols, row, params, scratch, narrow):
    """`add_rms_norm_row` keeping the unrounded sums in the scratch row, for
    a 16-bit `residual_out` that is also an input."""
    compute = scratch.dtype.type
    out_view, out_step, store_out = operands[0][0], operands[0][1], operands[0][3]
    sum_view, sum_step, store_sum = operands[1][0], operands[1][1], operands[1][3]
    a_view, a_step, load_a = operands[2][0], operands[2][1], operands[2][2]
    b_view, b_step, load_b = operands[3][0], operands[3][1], operands[3][2]
    weight_view, weight_step, load_weight = (
        operands[4][0],
        operands[4][1],
        operands[4][2],
    )
    total = 0.0
    for start in range(0, cols, SUM_BLOCK):
        partial = compute(0)
        for j in range(start, min(start + SUM_BLOCK, cols)):
            value = compute(load_a(a_view, unsigned(j * a_step))) + compute(
                load_b(b_view, unsigned(j * b_step))
            )
            store_sum(sum_view, unsigned(j * sum_step), value)
            scratch[unsigned(j)] = value
            partial += value * value
        total += partial
    scale = compute(1.0 / np.sqrt(total / cols + params[0]))
    for j in range(cols):
        value = scratch[j] * compute(load_weight(weight_view, j * weight_step))
        store_out(out_view, j * out_step, value * scale)


@helper
def fused_add_rms_norm_row(operands, cols, row, params, scratch, narrow):
    """Operands (input, residual, weight), the first two updated in place:
    ``residual += input``, then ``input = rms_norm(residual) * weight``;
    params (eps,). The second pass reads `residual` back: it holds the sum
    as rounded (`narrow`), which is what is normalised."""
    compute = scratch.dtype.type
    total = _add_squares(operands[0], operands[1], operands[1], narrow, cols, compute)
    _normalize(operands[0], operands[1], operands[2], cols, total, params[0], compute)


@helper
def softmax_row(operands, cols, row, params, scratch, narrow):
    """Operands (out, input); params (scale, q, exps_in_out).

    ``out = softmax(narrow(input) * scale)`` over the row. With ``q > 0`` a
    bottom-right aligned causal mask applies: in row `row` (of `q` rows per
    matrix) the first ``row % q + cols - q + 1`` elements take part, the
    rest are written as 0. A row with no element taking part is NaN, as
    `torch.softmax` of all `-inf`, and so is a whole row whose softmax is NaN
    (a NaN or `inf` taking part).

    Three passes: the maximum, the exponentials and their sum (float32
    partial sums of `SUM_BLOCK` elements added in float64), the scaling.
    With `exps_in_out` (an output in the compute type) the exponentials go
    to `out` and are scaled there; else to the scratch row, so that each
    result is rounded once.
    """
    out, out_step, store = operands[0][0], operands[0][1], operands[0][3]
    x, x_step, load = operands[1][0], operands[1][1], operands[1][2]
    out_load = operands[0][2]
    compute = scratch.dtype.type
    scale = compute(params[0])
    q = params[1]
    valid = cols if q <= 0 else row % q + cols - q + 1
    if valid <= 0:
        for j in range(cols):
            store(out, j * out_step, np.nan)
        return
    maximum = order_key(compute(-np.inf))
    for j in range(valid):
        value = compute(narrow(load(x, j * x_step))) * scale
        maximum = max(maximum, order_key(value))
    maximum = key_value(maximum)
    total = 0.0
    if params[2]:
        for start in range(0, valid, SUM_BLOCK):
            partial = compute(0)
            for j in range(start, min(start + SUM_BLOCK, valid)):
                value = compute(narrow(load(x, unsigned(j * x_step)))) * scale
                exponential = exp_nonpositive(value - maximum)
                store(out, unsigned(j * out_step), exponential)
                partial += exponential
            total += partial
        inverse = compute(1.0 / total)
        for j in range(valid):
            store(out, j * out_step, compute(out_load(out, j * out_step)) * inverse)
    else:
        for start in range(0, valid, SUM_BLOCK):
            partial = compute(0)
            for j in range(start, min(start + SUM_BLOCK, valid)):
                value = compute(narrow(load(x, unsigned(j * x_step)))) * scale
                exponential = exp_nonpositive(value - maximum)
                scratch[unsigned(j)] = exponential
                partial += exponential
            total += partial
        inverse = compute(1.0 / total)
        for j in range(valid):
            store(out, j * out_step, scratch[j] * inverse)
    # Masked elements are `exp(-inf - max) / total`: 0, or NaN when the row
    # is NaN (a NaN or infinite input), as in torch.
    masked = compute(0.0 if total == total else np.nan)
    for j in range(valid, cols):
        store(out, unsigned(j * out_step), masked)


def softmax_launch(input, out, dim: int, scale: float, causal: bool) -> RowLaunch:
    """`softmax_row` over dimension `dim` of `input` into `out` (metadata),
    with inputs multiplied by `scale` and, when `causal`, the causal mask
    over the last two dimensions (`dim` then is the last one).

    Computed in float32, float64 when `out` is float64; an input of
    another dtype than `out` is converted first (16-bit outputs round it,
    as ``input.to(dtype)`` would)."""
    ndim = input.ndim
    if ndim == 0:
        shape, in_strides, out_strides = (1,), (1,), (1,)
    else:
        order = [d for d in range(ndim) if d != dim] + [dim]
        shape = tuple(input.shape[d] for d in order)
        in_strides = tuple(input.strides[d] for d in order)
        out_strides = tuple(out.strides[d] for d in order)
    operands = [
        RowOperand(out, out_strides, written=True),
        RowOperand(input, in_strides),
    ]
    narrow = rounding(out.dtype) if input.dtype != out.dtype else identity
    compute = "float64" if out.dtype == "float64" else "float32"
    # The exponentials are kept in `out` when it holds them exactly.
    exps_in_out = out.dtype == compute
    params = (float(scale), input.shape[-2] if causal else 0, exps_in_out)
    return RowLaunch(softmax_row, shape, operands, params, narrow, compute)


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
