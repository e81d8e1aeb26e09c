"""Elementwise planning and the Triton helpers elementwise kernels share.

An elementwise launch covers the output's elements by linear index. When every
operand is contiguous in the output's order (after dropping size-1 dimensions
and merging mergeable ones) the index is the offset of every operand
(``NDIM == 0``, the fast path). Otherwise the kernel reads a small int64
*geometry* table on the device, ``[sizes..., strides of operand 0...,
strides of operand 1..., ...]`` over the coalesced dimensions, and turns the
index into one offset per operand (`strided_offsets2`/`strided_offsets3`).
Broadcast inputs have stride 0 in the table.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.core.geometry import AliasGuard, broadcast_strides, coalesce

from .runtime import INTERPRETER, Kernel, stream_context, torch_device

# Elements per program: 1024 keeps four warps busy with vector loads on GPUs;
# the interpreter runs each program as a NumPy step, so fewer, larger ones.
GPU_BLOCK = 1024
INTERPRETER_BLOCK_LIMIT = 16384


def next_power_of_two(value: int) -> int:
    return 1 << max(int(value) - 1, 0).bit_length()


def elementwise_block(numel: int) -> int:
    if INTERPRETER:
        return min(max(next_power_of_two(numel), 16), INTERPRETER_BLOCK_LIMIT)
    return GPU_BLOCK


@triton.jit
def block_indices(BLOCK: tl.constexpr):
    """The int64 linear indices this program covers."""
    return tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def strided_offsets2(index, geometry, NDIM: tl.constexpr):
    first = tl.zeros_like(index)
    second = tl.zeros_like(index)
    remaining = index
    for step in tl.static_range(NDIM):
        dim = NDIM - 1 - step
        size = tl.load(geometry + dim)
        coordinate = remaining % size
        remaining = remaining // size
        first += coordinate * tl.load(geometry + NDIM + dim)
        second += coordinate * tl.load(geometry + 2 * NDIM + dim)
    return first, second


@triton.jit
def strided_offsets3(index, geometry, NDIM: tl.constexpr):
    first = tl.zeros_like(index)
    second = tl.zeros_like(index)
    third = tl.zeros_like(index)
    remaining = index
    for step in tl.static_range(NDIM):
        dim = NDIM - 1 - step
        size = tl.load(geometry + dim)
        coordinate = remaining % size
        remaining = remaining // size
        first += coordinate * tl.load(geometry + NDIM + dim)
        second += coordinate * tl.load(geometry + 2 * NDIM + dim)
        third += coordinate * tl.load(geometry + 3 * NDIM + dim)
    return first, second, third


def geometry_table(shape, operand_strides, device):
    """The int64 device tensor `strided_offsets*` read."""
    import torch

    values = list(shape)
    for strides in operand_strides:
        values += list(strides)
    return torch.tensor(values, dtype=torch.int64, device=torch_device(device))


class OverlapGuard:
    """Whether an output overlaps an input other than element for element
    (the same address, strides and dtype), which needs a staging buffer."""

    def __init__(self, out, inputs) -> None:
        self.guard = AliasGuard(
            out, tuple(out.strides), [(meta, tuple(meta.strides)) for meta in inputs]
        )

    def __call__(self, out, inputs) -> bool:
        return self.guard.needs_staging(
            out.data_ptr(), [tensor.data_ptr() for tensor in inputs]
        )


class ElementwiseLaunch:
    """A planned elementwise kernel over `out`'s shape.

    The kernel takes ``(out, *inputs, geometry, numel, *scalars, NDIM, BLOCK,
    *constexprs)``; inputs broadcast to `out`'s shape. Calling the launch
    with the caller's tensors stages the result when `out` overlaps an input.
    """

    def __init__(
        self,
        kernel: Kernel,
        device,
        out,
        inputs,
        scalars=(),
        constexprs: dict | None = None,
        guard_inputs=None,
    ) -> None:
        shape = tuple(out.shape)
        operand_strides = [tuple(out.strides)] + [
            broadcast_strides(meta.shape, meta.strides, shape) for meta in inputs
        ]
        numel = 1
        for size in shape:
            numel *= size
        self.numel = numel
        self.device = device
        coalesced, strides = coalesce(*_order_by_output(shape, operand_strides))
        flat = len(coalesced) <= 1 and all(s[-1:] in ((1,), ()) for s in strides)
        if flat:
            ndim, geometry = 0, Pointer64()
        else:
            ndim = len(coalesced)
            geometry = geometry_table(coalesced, strides, device)
        self.geometry = geometry
        block = elementwise_block(numel)
        self.launch = kernel.bind(
            grid=(-(-numel // block),),
            arguments=(out, *inputs, _pointer("int64"), numel, *scalars),
            constexprs={"NDIM": ndim, "BLOCK": block, **(constexprs or {})},
            device=device,
        )
        # Inputs as far as they reach, when they are views of larger ones.
        self.overlap = OverlapGuard(out, guard_inputs or inputs)

    def __call__(self, stream: int, out, *inputs) -> None:
        if self.numel == 0:
            return
        geometry = self.geometry if not isinstance(self.geometry, Pointer64) else out
        if self.overlap(out, inputs):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self.launch(stream, staging, *inputs, geometry)
                out.copy_(staging)
            return
        self.launch(stream, out, *inputs, geometry)


def _order_by_output(shape, operand_strides):
    """Dimensions ordered by decreasing output stride (stable), so that
    consecutive indices write neighbouring output elements whatever the
    output's layout (a transposed output is walked along its columns)."""
    first = operand_strides[0]
    order = sorted(range(len(shape)), key=lambda i: -abs(first[i]))
    return (
        tuple(shape[i] for i in order),
        [tuple(strides[i] for i in order) for strides in operand_strides],
    )


class Pointer64:
    """Marks the unused geometry pointer of a flat launch (any tensor will do)."""


def _pointer(dtype):
    from .runtime import Pointer

    return Pointer(dtype)


def staging_like(out):
    import torch

    return torch.empty_strided(
        tuple(out.shape), out.stride(), dtype=out.dtype, device=out.device
    )


def compute_type(dtype: str):
    """The type elementwise arithmetic runs in: float32 for 16-bit floats (and
    float32), float64 for float64, `None` (the dtype itself) for integers and
    `bool`."""
    if dtype in ("float16", "bfloat16", "float32"):
        return tl.float32
    if dtype == "float64":
        return tl.float64
    return None


@triton.jit
def from_bfloat16(value):
    """bfloat16 to float32, exactly, by moving the bits (the interpreter's
    `.to` mishandles subnormals; GPUs do the same shift)."""
    bits = value.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def load_as(pointer, mask, COMPUTE: tl.constexpr):
    """Loads and converts to `COMPUTE` (unless it is `None`)."""
    value = tl.load(pointer, mask=mask)
    if value.dtype == tl.bfloat16:
        value = from_bfloat16(value)
    if COMPUTE is not None:
        value = value.to(COMPUTE)
    return value


@triton.jit
def to_bfloat16(value):
    """float32 to bfloat16, rounding to nearest even (NaN to the quiet NaN
    0x7FC0, as torch does). Triton's interpreter truncates in `.to`, so the
    rounding is spelled out; on GPUs it costs a few integer operations of a
    memory-bound kernel."""
    bits = value.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    upper = tl.where(value != value, 0x7FC0, rounded)
    return upper.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def store_as(pointer, value, mask):
    """Stores `value` converted to the pointer's element type, bfloat16
    rounded to nearest even from float32."""
    if pointer.dtype.element_ty == tl.bfloat16:
        tl.store(pointer, to_bfloat16(value.to(tl.float32)), mask=mask)
    else:
        tl.store(pointer, value.to(pointer.dtype.element_ty), mask=mask)


@triton.jit
def bits_pointer(pointer):
    """`pointer` reinterpreted as a pointer to the signed integer type of its
    element's width (`bool` as int8): loads and stores through it move bits
    unchanged (NaN payloads included)."""
    width: tl.constexpr = pointer.dtype.element_ty.primitive_bitwidth
    if width == 1 or width == 8:
        return pointer.to(tl.pointer_type(tl.int8), bitcast=True)
    elif width == 16:
        return pointer.to(tl.pointer_type(tl.int16), bitcast=True)
    elif width == 32:
        return pointer.to(tl.pointer_type(tl.int32), bitcast=True)
    else:
        return pointer.to(tl.pointer_type(tl.int64), bitcast=True)


@triton.jit
def round_as(value, pointer):
    """`value` rounded as storing it through `pointer` would round it, in
    `value`'s type (bfloat16 to nearest even, as `store_as` does)."""
    element = pointer.dtype.element_ty
    if element == tl.bfloat16:
        return from_bfloat16(to_bfloat16(value.to(tl.float32))).to(value.dtype)
    else:
        return value.to(element).to(value.dtype)


@triton.jit
def load_or_zero(pointer, mask, COMPUTE: tl.constexpr):
    """`load_as` with masked-off elements read as 0 (for reductions)."""
    value = tl.load(pointer, mask=mask, other=0)
    if value.dtype == tl.bfloat16:
        value = from_bfloat16(value)
    if COMPUTE is not None:
        value = value.to(COMPUTE)
    return value
