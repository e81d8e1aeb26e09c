"""How CPU elementwise kernels walk their operands.

An elementwise operator over tensors of one output shape is planned once (when
the operator is built) into `rows` x `inner` elements (`ElementwisePlan`): the
innermost coalesced dimension is walked with a constant stride per operand,
and each row starts at a precomputed offset per operand. Contiguous operands
collapse to a single row. Beside the plan: how it is cut into parallel chunks
(`chunking`), whether an output is written with streaming stores (`streams`),
and the staging buffer of an output that overlaps an input (`staging_like`).
"""

from __future__ import annotations

import numpy as np

from infini.ops.core.geometry import coalesce, span

from .memory import streaming_threshold


class ElementwisePlan:
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


def chunking(plan: ElementwisePlan, cost: int = 1) -> tuple[int, int]:
    """`(chunk_size, chunk_count)` for a plan: one chunk when small. `cost`
    is an element's work in copied elements: an activation that takes an
    exponential and a division per element (`ACTIVATION_COST`) is worth
    the pool at fewer elements, and in smaller chunks."""
    total = plan.rows * plan.inner
    if total * cost < PARALLEL_THRESHOLD:
        return max(total, 1), 1
    # Smaller chunks only for a job that would otherwise run serially.
    chunk = CHUNK if total >= PARALLEL_THRESHOLD else max(CHUNK // cost, 1)
    return chunk, -(-total // chunk)


# `chunking`'s cost of an exponential and a division per element (on AVX2
# a float32 `silu` runs at about 0.7 ns per element, a copy at about 0.1).
ACTIVATION_COST = 8


def staging_like(out):
    """An uninitialised tensor with the layout of `out` (for staged writes)."""
    import torch

    return torch.empty_strided(
        out.shape, out.stride(), dtype=out.dtype, device=out.device
    )
