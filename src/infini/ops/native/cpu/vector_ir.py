"""LLVM vector IR building blocks for the kernels written as Numba
intrinsics (`ggml`, `ggml_interleaved`, `weight_rows`): typed loads at
integer addresses, splats, intrinsic declarations and loops.

The kernels build vector IR where Numba's loops cannot say what they need:
x86 instructions LLVM does not select from plain IR (`pmaddubsw`,
`vpdpbusd`, `vdpbf16ps`), or vectors of a fixed shape whose lanes are rows.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types

I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()


def vector_type(element, count):
    return ir.VectorType(element, count)


def i64(value):
    return ir.Constant(I64, value)


def add_offset(builder, address, delta):
    """The integer `address` plus the constant `delta`."""
    return builder.add(address, ir.Constant(address.type, delta))


def load_vector(builder, address, element, count):
    """`count` elements at an integer address, with no alignment assumed."""
    pointer = builder.inttoptr(address, vector_type(element, count).as_pointer())
    return builder.load(pointer, align=1)


def splat(builder, value, count):
    """A vector of `count` copies of the scalar `value`."""
    splatted = vector_type(value.type, count)
    single = builder.insert_element(
        ir.Constant(splatted, ir.Undefined), value, ir.Constant(I32, 0)
    )
    return builder.shuffle_vector(
        single,
        ir.Constant(splatted, ir.Undefined),
        ir.Constant(vector_type(I32, count), [0] * count),
    )


def constant_splat(element, count, value):
    return ir.Constant(vector_type(element, count), [value] * count)


def declare(builder, name, return_type, arg_types):
    """The LLVM function `name` of the module, declared on first use
    (llvmlite cannot name overloaded intrinsics of vector types itself)."""
    function = builder.module.globals.get(name)
    if function is None:
        function = ir.Function(
            builder.module, ir.FunctionType(return_type, arg_types), name
        )
    return function


def integers(*arg_types) -> bool:
    """Whether every Numba argument type is an integer (the intrinsics take
    addresses and counts as integers)."""
    return all(isinstance(t, types.Integer) for t in arg_types)


def float_total(builder, vector):
    """The sum of the lanes of a float vector: halves added until one lane
    remains."""
    while vector.type.count > 1:
        half = vector.type.count // 2
        low, high = (
            builder.shuffle_vector(
                vector,
                vector,
                ir.Constant(vector_type(I32, half), list(range(start, start + half))),
            )
            for start in (0, half)
        )
        vector = builder.fadd(low, high)
    return builder.extract_element(vector, I32(0))


def carried_loop(builder, count, name, initial, body):
    """A loop of `count` iterations (none when ``count <= 0``) that carries
    the IR values `initial` from one iteration to the next: ``body(index,
    values)`` emits one iteration (`index` from 0) and returns the values
    it leaves. Returns the values after the loop (`initial` where it did
    not run)."""
    entry = builder.block
    loop = builder.append_basic_block(name)
    after = builder.append_basic_block(f"{name}_done")
    builder.cbranch(builder.icmp_signed(">", count, i64(0)), loop, after)
    builder.position_at_end(loop)
    index = builder.phi(I64)
    carried = [builder.phi(value.type) for value in initial]
    updated = body(index, carried)
    following = builder.add(index, i64(1))
    end = builder.block
    index.add_incoming(i64(0), entry)
    index.add_incoming(following, end)
    for phi, start, value in zip(carried, initial, updated, strict=True):
        phi.add_incoming(start, entry)
        phi.add_incoming(value, end)
    builder.cbranch(builder.icmp_signed("<", following, count), loop, after)
    builder.position_at_end(after)
    results = []
    for start, value in zip(initial, updated, strict=True):
        merged = builder.phi(start.type)
        merged.add_incoming(start, entry)
        merged.add_incoming(value, end)
        results.append(merged)
    return results


# Bytes per cache line on the CPUs the kernels are built for (x86-64, and
# the 64-byte lines of most AArch64 cores): `prefetch_lines` hints one per
# line.
CACHE_LINE = 64


def prefetch_lines(builder, address, size):
    """Prefetches (for reading, into every cache level) the cache lines of
    the `size` bytes at the integer `address`: one hint per line, so a
    stretch that does not start on a line's boundary may leave its last
    line to the hardware."""
    pointer_type = I8.as_pointer()
    prefetch = declare(
        builder, "llvm.prefetch.p0", ir.VoidType(), [pointer_type, I32, I32, I32]
    )
    for offset in range(0, size, CACHE_LINE):
        pointer = builder.inttoptr(add_offset(builder, address, offset), pointer_type)
        builder.call(prefetch, [pointer, I32(0), I32(3), I32(1)])
