"""Row kernels of the NineToothed backend: one row of the last dimension
per program, walked in blocks.

`row_blocks` is the arrangement step: the last dimension is cut into
``block``-element tiles and each program gets every tile of one row, so the
application loops over ``tensor.shape[0]`` blocks. The kernel does not
depend on the row length: one compiled kernel per rank, dtypes and block
serves every shape. `RowOperands` turns an operator's tensors into the
shapes and strides the kernel sees: a chosen dimension moved last, 0-d and
1-D tensors as one row.
"""

from __future__ import annotations

from infini.ops.runtime.triton import INTERPRETER, next_power_of_two

MIN_BLOCK = 16
MAX_BLOCK = 4096 if not INTERPRETER else 16384


def row_blocks(tensor, block):
    leading = tensor.ndim - 1
    tiled = tensor.tile((1,) * leading + (block,))
    tiled = tiled.tile((1,) * leading + (-1,))
    tiled.dtype = tiled.dtype.squeeze(tuple(range(leading)))
    tiled.dtype.dtype = tiled.dtype.dtype.squeeze(tuple(range(leading)))
    return tiled


def row_block(width: int) -> int:
    """Columns per block: the row length rounded up to a power of two,
    between `MIN_BLOCK` and `MAX_BLOCK` (the interpreter runs a block as one
    NumPy step, so it takes wide ones)."""
    return min(max(next_power_of_two(width), MIN_BLOCK), MAX_BLOCK)


def as_rows(meta, dim: int | None = None) -> tuple[tuple, tuple]:
    """`(shape, strides)` of `meta` with `dim` (default the last) moved to
    the end, at least 2-D (missing leading dimensions are one row)."""
    shape, strides = list(meta.shape), list(meta.strides)
    if not shape:
        shape, strides = [1], [1]
    if dim is not None and dim != len(shape) - 1:
        shape.append(shape.pop(dim))
        strides.append(strides.pop(dim))
    while len(shape) < 2:
        shape.insert(0, 1)
        strides.insert(0, 0)
    return tuple(shape), tuple(strides)
