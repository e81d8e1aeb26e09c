"""Row-wise kernels: operators that reduce over the last dimension (RMS
normalisation, softmax) and write a row of the same length.

A tensor of shape ``(..., cols)`` is walked as `rows` rows of `cols`
elements. The leading dimensions are coalesced (merged where every operand
is contiguous across them) and a row's start offset is computed from its
index, so any strides work without a per-row table. Rows keep their
row-major order, so a row index still tells the position within each
leading dimension (the causal mask uses it).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from .elementwise import coalesce, loader, storer
from .jit import helper, kernel
from .memory import STORAGE, element_array, span

# Elements per parallel chunk, and the size below which kernels run serially
# (waking the thread pool costs more than it saves on small tensors).
CHUNK_ELEMENTS = 16384
PARALLEL_THRESHOLD = 65536


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
        self.spans = tuple(span(shape, strides) for strides in operand_strides)
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


def _compute_type(dtype: str):
    return np.float64 if dtype == "float64" else np.float32


@cache
def rms_norm_kernels(x_dtype: str, weight_dtype: str, out_dtype: str):
    """Serial and parallel kernels for
    ``out = x / sqrt(mean(x^2) + eps) * weight`` over the rows of
    `x` (operand 1) into `out` (operand 0); `weight` is walked with its own
    step. Accumulates in float32 (float64 for float64 inputs)."""
    compute = _compute_type(x_dtype)
    load_x, load_weight = loader(x_dtype), loader(weight_dtype)
    store = storer(out_dtype, "float64" if compute is np.float64 else "float32")
    x_storage, weight_storage = STORAGE[x_dtype], STORAGE[weight_dtype]
    out_storage = STORAGE[out_dtype]

    def run(
        out_address,
        x_address,
        weight_address,
        out_span,
        x_span,
        weight_span,
        rows,
        cols,
        shape,
        strides,
        out_step,
        x_step,
        weight_step,
        eps,
        chunks,
    ):
        o = element_array(out_address, out_span, out_storage)
        x = element_array(x_address, x_span, x_storage)
        w = element_array(weight_address, weight_span, weight_storage)
        epsilon = compute(eps)
        count = compute(cols)
        for chunk in prange(chunks):
            first = chunk * rows // chunks
            last = (chunk + 1) * rows // chunks
            for row in range(first, last):
                out_base = row_offset(row, shape, strides, 0)
                x_base = row_offset(row, shape, strides, 1)
                total = compute(0)
                for j in range(cols):
                    value = compute(load_x(x, x_base + j * x_step))
                    total += value * value
                scale = compute(1) / np.sqrt(total / count + epsilon)
                for j in range(cols):
                    value = compute(load_x(x, x_base + j * x_step))
                    weight = compute(load_weight(w, j * weight_step))
                    store(o, out_base + j * out_step, value * scale * weight)

    # `reassoc` lets the sum of squares use several partial sums (vector
    # lanes), which is faster and no less accurate than one running sum.
    fastmath = {"reassoc", "contract"}
    return kernel(run, fastmath=fastmath), kernel(run, parallel=True, fastmath=fastmath)


@cache
def causal_softmax_kernels(dtype: str):
    """Serial and parallel kernels for a softmax over each row of `x`
    (operand 1) into `out` (operand 0) under a bottom-right aligned causal
    mask: in row `i` (of `q` rows per matrix) the first
    ``i + cols - q + 1`` elements take part, the rest are written as 0. A row
    with no element taking part is NaN, as `torch.softmax` of all `-inf`, and
    so is a whole row whose softmax is NaN (a NaN or `inf` taking part).
    Exponentials are computed in float32 (float64 for float64), their sum in
    float64, and each result rounded once."""
    compute = _compute_type(dtype)
    load = loader(dtype)
    # The quotient is float64; it is rounded once to the output, except for
    # float16, whose direct float64 conversion needs a compiler-runtime
    # routine (`__truncdfhf2`) that Numba cannot link, so it goes through
    # float32 (as torch's own float64 -> float16 conversion does).
    store = storer(dtype, "float32" if dtype == "float16" else "float64")
    storage = STORAGE[dtype]

    def run(
        out_address,
        x_address,
        out_span,
        x_span,
        rows,
        cols,
        q,
        shape,
        strides,
        out_step,
        x_step,
        chunks,
    ):
        o = element_array(out_address, out_span, storage)
        x = element_array(x_address, x_span, storage)
        for chunk in prange(chunks):
            first = chunk * rows // chunks
            last = (chunk + 1) * rows // chunks
            # Inputs are staged here so that an in-place softmax reads its row
            # before writing it.
            buffer = np.empty(cols, compute)
            for row in range(first, last):
                out_base = row_offset(row, shape, strides, 0)
                x_base = row_offset(row, shape, strides, 1)
                valid = row % q + cols - q + 1
                if valid <= 0:
                    for j in range(cols):
                        store(o, out_base + j * out_step, np.nan)
                    continue
                maximum = compute(-np.inf)
                for j in range(valid):
                    value = compute(load(x, x_base + j * x_step))
                    buffer[j] = value
                    if value > maximum:
                        maximum = value
                total = 0.0
                for j in range(valid):
                    exponential = np.exp(buffer[j] - maximum)
                    buffer[j] = exponential
                    total += exponential
                for j in range(valid):
                    store(o, out_base + j * out_step, buffer[j] / total)
                # Masked elements are `exp(-inf - max) / total`: 0, or NaN when
                # the row is NaN (a NaN or infinite input), as in torch.
                masked = 0.0 if total == total else np.nan
                for j in range(valid, cols):
                    store(o, out_base + j * out_step, masked)

    return kernel(run), kernel(run, parallel=True)
