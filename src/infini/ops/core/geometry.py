"""Tensor geometry shared by every layer: broadcasting, dimension merging,
memory extents and overlap.

Plain Python on shapes and strides (in elements), so that a base can validate
and a backend can plan without importing a kernel library.
"""

from __future__ import annotations


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


def broadcast_strides(meta_shape, meta_strides, shape) -> tuple[int, ...]:
    """Strides of a tensor broadcast to `shape` (0 on broadcast dimensions)."""
    offset = len(shape) - len(meta_shape)
    strides = [0] * len(shape)
    for i, (size, stride) in enumerate(zip(meta_shape, meta_strides, strict=False)):
        strides[offset + i] = 0 if size == 1 and shape[offset + i] != 1 else stride
    return tuple(strides)


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


def span(shape, strides) -> int:
    """How many elements past the data pointer a tensor reaches (0 if empty)."""
    extent = 1
    for size, stride in zip(shape, strides):
        if size == 0:
            return 0
        extent += (size - 1) * stride
    return extent


def ranges_overlap(address_a, span_a, size_a, address_b, span_b, size_b) -> bool:
    """Whether two tensors' memory ranges intersect (spans in elements, sizes
    in bytes per element)."""
    if span_a == 0 or span_b == 0:
        return False
    end_a = address_a + span_a * size_a
    end_b = address_b + span_b * size_b
    return address_a < end_b and address_b < end_a


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


def overlaps_itself(shape, strides) -> bool:
    """Whether two elements of a strided layout share memory.

    Sorted by stride, every dimension must step past everything the smaller
    ones reach; that is exact for the layouts views produce and errs towards
    "overlaps" for exotic interleavings, which are then rejected rather than
    written twice. A stride-0 dimension of size > 1 overlaps; a tensor
    without elements never does.
    """
    dimensions = sorted(
        (abs(stride), size) for size, stride in zip(shape, strides) if size != 1
    )
    if any(size == 0 for size in shape):
        return False
    reach = 0
    for stride, size in dimensions:
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def byte_range(address: int, shape, strides, element_size: int) -> tuple[int, int]:
    """(lowest, highest + 1) byte addresses a tensor touches; an empty range
    for a tensor without elements."""
    low = high = 0
    for size, stride in zip(shape, strides):
        if size == 0:
            return address, address
        if stride < 0:
            low += (size - 1) * stride
        else:
            high += (size - 1) * stride
    return address + low * element_size, address + (high + 1) * element_size


def written_geometry_problem(shape, strides) -> str | None:
    """Why a tensor of this geometry cannot be written (each element must be
    written once), or `None` when it can."""
    if any(size == 0 for size in shape):
        return None
    if any(stride == 0 and size > 1 for size, stride in zip(shape, strides)):
        return (
            f"has a stride-0 (broadcast) dimension: shape {tuple(shape)}, "
            f"strides {tuple(strides)}"
        )
    if overlaps_itself(shape, strides):
        return (
            f"has elements that share memory: shape {tuple(shape)}, "
            f"strides {tuple(strides)}"
        )
    return None
