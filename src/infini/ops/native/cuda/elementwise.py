"""Elementwise kernels of the CUDA-like platforms: planning, the Triton
helpers they share, and the unary, binary and gated templates.

An elementwise launch covers the output's elements by linear index. When every
operand is contiguous in the output's order (after dropping size-1 dimensions
and merging mergeable ones) the index is the offset of every operand
(``NDIM == 0``, the fast path). Otherwise the kernel reads a small int64
*geometry* table on the device, ``[sizes..., strides of operand 0...,
strides of operand 1..., ...]`` over the coalesced dimensions, and turns the
index into one offset per operand (`element_offsets2`/`element_offsets3`).
Broadcast inputs have stride 0 in the table.

An operator whose result is one function of its operands, element for
element, writes only that function (a `@triton.jit` function of loaded
values) and launches one of the templates with it:

- `UnaryElementwise`: ``out = function(input)``;
- `BinaryElementwise`: ``out = function(input, other, scalar)``, the inputs
  broadcast to `out`'s shape;
- `GatedElementwise`: ``out = function(input[..., :h], input[..., h:])``.

The function is a `tl.constexpr` argument of the template kernel, which
Triton inlines when it compiles: each operator gets its own machine code,
and its own compile-cache entry (the function's source is part of the key).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.core.geometry import broadcast_strides, coalesce
from infini.ops.core.streams import stream_context
from infini.ops.core.tensor import TensorMeta
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    Pointer,
    next_power_of_two,
    require_device,
    staging_like,
    torch_device,
)

# Elements per program: 1024 keeps four warps busy with vector loads on GPUs;
# the interpreter runs each program as a NumPy step, so fewer, larger ones.
GPU_BLOCK = 1024
INTERPRETER_BLOCK_LIMIT = 16384


def elementwise_block(numel: int) -> int:
    if INTERPRETER:
        return min(max(next_power_of_two(numel), 16), INTERPRETER_BLOCK_LIMIT)
    return GPU_BLOCK


@triton.jit
def block_indices(BLOCK: tl.constexpr):
    """The int64 linear indices this program covers."""
    return tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def element_offsets2(index, geometry, NDIM: tl.constexpr):
    """The offsets of linear index `index` in `out` and one input: `index`
    itself on the fast path (``NDIM == 0``), otherwise from the geometry
    table."""
    if NDIM == 0:
        first = index
        second = index
    else:
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
def element_offsets3(index, geometry, NDIM: tl.constexpr):
    """`element_offsets2` for `out` and two inputs."""
    if NDIM == 0:
        first = index
        second = index
        third = index
    else:
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
    """The int64 device tensor `element_offsets*` read."""
    import torch

    values = list(shape)
    for strides in operand_strides:
        values += list(strides)
    return torch.tensor(values, dtype=torch.int64, device=torch_device(device))


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
            arguments=(out, *inputs, Pointer("int64"), numel, *scalars),
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


# -- templates: one kernel per family, specialised on the function ---------------


@triton.jit
def unary_kernel(
    out,
    input,
    geometry,
    numel,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
    FUNCTION: tl.constexpr,
    COMPUTE: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    out_offset, input_offset = element_offsets2(index, geometry, NDIM)
    if COMPUTE is None:
        # The values as stored, bit for bit, and a result of the same type.
        x = tl.load(input + input_offset, mask=mask)
        tl.store(out + out_offset, FUNCTION(x), mask=mask)
    else:
        x = load_as(input + input_offset, mask, COMPUTE)
        store_as(out + out_offset, FUNCTION(x), mask)


@triton.jit
def binary_kernel(
    out,
    input,
    other,
    geometry,
    numel,
    scalar,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
    FUNCTION: tl.constexpr,
    COMPUTE: tl.constexpr,
    SCALAR: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    out_offset, input_offset, other_offset = element_offsets3(index, geometry, NDIM)
    x = load_as(input + input_offset, mask, COMPUTE)
    y = load_as(other + other_offset, mask, COMPUTE)
    if SCALAR is None:
        result = FUNCTION(x, y, scalar)
    else:
        result = FUNCTION(x, y, SCALAR)
    store_as(out + out_offset, result, mask)


@triton.jit
def gated_kernel(
    out,
    input,
    geometry,
    numel,
    second,
    NDIM: tl.constexpr,
    BLOCK: tl.constexpr,
    FUNCTION: tl.constexpr,
    COMPUTE: tl.constexpr,
):
    index = block_indices(BLOCK)
    mask = index < numel
    out_offset, input_offset = element_offsets2(index, geometry, NDIM)
    x = load_as(input + input_offset, mask, COMPUTE)
    y = load_as(input + input_offset + second, mask, COMPUTE)
    store_as(out + out_offset, FUNCTION(x, y), mask)


UNARY_KERNEL = Kernel(unary_kernel)
BINARY_KERNEL = Kernel(binary_kernel)
GATED_KERNEL = Kernel(gated_kernel)


class UnaryElementwise(ElementwiseLaunch):
    """``out = function(input)`` for a unary operator; the instance is the
    operator's `launch` (``launch(stream, input, out)``).

    `function` takes one value: `input`'s element converted to `compute`
    (default: `compute_type` of `out`'s dtype), its result rounded once on
    the store. With ``as_stored=True`` it gets the elements as stored, bit
    for bit, and returns the same type (functions that only select, such as
    `relu`, keep NaN payloads that way).
    """

    def __init__(
        self, operator, out, input, function, *, compute=None, as_stored=False
    ) -> None:
        require_device(operator.name, operator.device)
        if as_stored:
            compute = None
        elif compute is None:
            compute = compute_type(out.dtype)
        super().__init__(
            UNARY_KERNEL,
            operator.device,
            out,
            (input,),
            constexprs={"FUNCTION": function, "COMPUTE": compute},
        )

    def __call__(self, stream: int, input, out) -> None:
        ElementwiseLaunch.__call__(self, stream, out, input)


class BinaryElementwise(ElementwiseLaunch):
    """``out = function(input, other, scalar)`` for a binary operator whose
    inputs broadcast to `out`; the instance is the operator's `launch`
    (``launch(stream, input, other, out)``).

    `function` takes both elements converted to `compute_type` of `out`'s
    dtype and `scalar` (a number fixed when the operator is built; 1 when
    the operator has none). Its result is rounded once on the store.
    """

    def __init__(self, operator, out, input, other, function, scalar=1) -> None:
        require_device(operator.name, operator.device)
        # A runtime float scalar reaches the kernel as float32, so float64
        # takes `scalar` as a constant instead.
        wide = out.dtype == "float64"
        super().__init__(
            BINARY_KERNEL,
            operator.device,
            out,
            (input, other),
            scalars=(0.0 if wide else scalar,),
            constexprs={
                "FUNCTION": function,
                "COMPUTE": compute_type(out.dtype),
                "SCALAR": float(scalar) if wide else None,
            },
        )

    def __call__(self, stream: int, input, other, out) -> None:
        ElementwiseLaunch.__call__(self, stream, out, input, other)


class GatedElementwise(ElementwiseLaunch):
    """``out = function(input[..., :h], input[..., h:])`` with ``h`` the last
    dimension of `out`; the instance is the operator's `launch`
    (``launch(stream, input, out)``).

    The two halves are one operand of the elementwise plan (they share
    `input`'s strides); the second half starts ``h`` elements further along
    the last dimension. `function` takes both elements converted to
    `compute_type` of `out`'s dtype.
    """

    def __init__(self, operator, out, input, function) -> None:
        require_device(operator.name, operator.device)
        first_half = TensorMeta(
            out.shape, input.strides, input.dtype, input.device, input.torch_dtype
        )
        super().__init__(
            GATED_KERNEL,
            operator.device,
            out,
            (first_half,),
            scalars=(out.shape[-1] * input.strides[-1],),
            constexprs={"FUNCTION": function, "COMPUTE": compute_type(out.dtype)},
            # The overlap test covers all of `input`, both halves.
            guard_inputs=(input,),
        )

    def __call__(self, stream: int, input, out) -> None:
        ElementwiseLaunch.__call__(self, stream, out, input)
