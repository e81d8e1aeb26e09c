"""GGML block-quantised weights on the CPU: dequantisation and the products
with 8-bit quantised activations (`ggml_dequantize`, `ggml_mul_mat_vec_a8`,
`ggml_mul_mat_a8`). The block layouts are described in
`infini.ops.base._ggml`.

The products read the packed blocks directly. Each activation row is first
quantised into int8 codes with one float32 scale per 32 values (plus the
code sums the formats with a minimum or an offset need); a weight block then
meets the codes in integer dot products written as LLVM vector IR (the
intrinsics below): the block's bytes are loaded as one vector, their codes
unpacked with vector shifts and masks, widened, multiplied with the
activation codes and summed. On x86 with AVX2 the unsigned codes meet the
activations in the byte multiply-adds (`pmaddubsw`, `pmaddwd`: `_MADD`),
which LLVM does not find by itself; elsewhere LLVM lowers the widening
multiply to what the host has (`sdot`/`smull` on AArch64). Plain Numba
loops of 16 or 32 iterations are unrolled before the vectoriser sees them
and stay scalar. For every type but Q2_K and Q3_K a whole weight row is
one IR loop (`DOT_ROW`): each group of 32 codes leaves eight int32 lane
sums, scaled by the group's float32 factor into a float32 vector that is
summed once per row. Q2_K and Q3_K reduce each group to one integer and
scale it in scalar code (`DOT_BLOCK`), as the odd last block of a row does.

From `tiled_min_tokens()` tokens (16, or 32 with VNNI) a product is float32
BLAS instead (`TiledProductPlan`): the quantised activations ``d * q`` as a float32
matrix, times panels of weight rows dequantised (with the same vector IR as
`ggml_dequantize`) into a scratch buffer that stays in the cache.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic, overload

from infini.ops.base._ggml import (
    ACTIVATION_BLOCK,
    GGML_TYPES,
    Q2_K,
    Q3_K,
    Q4_0,
    Q4_1,
    Q4_K,
    Q5_0,
    Q5_1,
    Q5_K,
    Q6_K,
    Q8_0,
)

from .binding import bound, do_nothing
from .blas import HostView, matmul_into
from .dtype_io import loader, storer
from .jit import compiled_with, helper, kernel
from .memory import STORAGE, element_array
from .vector_ir import (
    F32,
    I8,
    I16,
    I32,
    I64,
    add_offset,
    carried_loop,
    constant_splat,
    declare,
    float_total,
    integers,
    load_vector,
    splat,
    vector_type,
)


def _reduce_add(builder, vector):
    count = vector.type.count
    name = f"llvm.vector.reduce.add.v{count}i{vector.type.element.width}"
    function = declare(builder, name, vector.type.element, [vector.type])
    return builder.call(function, [vector])


def _dot_unsigned(builder, codes, x_address):
    """``sum(codes[j] * x[j])``: `codes` an i8 vector of unsigned codes
    (below 128), `x` as many int8 activation codes at `x_address`."""
    count = codes.type.count
    x = load_vector(builder, x_address, I8, count)
    if count in _MADD and x86_madd_instructions():
        return _reduce_add(builder, _madd(builder, codes, x))
    wide = vector_type(I32, count)
    return _reduce_add(
        builder, builder.mul(builder.zext(codes, wide), builder.sext(x, wide))
    )


# The x86 byte multiply-adds by vector length: unsigned bytes times signed
# bytes summed in adjacent pairs (`pmaddubsw`), then 16-bit words summed in
# adjacent pairs (`pmaddwd`). LLVM does not find them in the widening
# multiply above by itself: it widens to 32 bits and multiplies there, four
# times the instructions. Codes below 64 times activations of at most 127
# never saturate the 16-bit pair sums.
_MADD = {
    16: ("llvm.x86.ssse3.pmadd.ub.sw.128", "llvm.x86.sse2.pmadd.wd"),
    32: ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"),
}


# The same sums in one instruction (VNNI's `vpdpbusd`), added to an int32
# accumulator and with no 16-bit step. LLVM upgrades this (older) form of
# the declaration to whichever its version has.
_DOT_BYTES = {16: "llvm.x86.avx512.vpdpbusd.128", 32: "llvm.x86.avx512.vpdpbusd.256"}


def vnni_instructions() -> bool:
    """Whether the kernels are compiled for an x86 CPU with `vpdpbusd` on
    16- and 32-byte vectors (AVX-VNNI, or AVX-512 VNNI with AVX-512 VL)."""
    return compiled_with("avxvnni") or compiled_with("avx512vnni", "avx512vl")


def dot_bytes(builder, total, unsigned, signed):
    """`total` (int32 lanes; None for zeros) plus the int32 sums of four
    adjacent ``unsigned[j] * signed[j]`` of two i8 vectors of 16 or 32
    elements: one `vpdpbusd` (`vnni_instructions` must hold)."""
    count = unsigned.type.count
    lanes = vector_type(I32, count // 4)
    if total is None:
        total = ir.Constant(lanes, [0] * (count // 4))
    function = declare(builder, _DOT_BYTES[count], lanes, [lanes] * 3)
    return builder.call(
        function,
        [total, builder.bitcast(unsigned, lanes), builder.bitcast(signed, lanes)],
    )


def _madd(builder, unsigned, signed):
    """The int32 sums of four adjacent ``unsigned[j] * signed[j]`` of two i8
    vectors of 16 or 32 elements (`_MADD`, or `dot_bytes` with VNNI)."""
    if vnni_instructions():
        return dot_bytes(builder, None, unsigned, signed)
    count = unsigned.type.count
    bytes_name, words_name = _MADD[count]
    words_type = vector_type(I16, count // 2)
    pairs = builder.call(
        declare(builder, bytes_name, words_type, [unsigned.type, signed.type]),
        [unsigned, signed],
    )
    return builder.call(
        declare(
            builder,
            words_name,
            vector_type(I32, count // 4),
            [words_type, words_type],
        ),
        [pairs, constant_splat(I16, count // 2, 1)],
    )


def x86_madd_instructions() -> bool:
    """Whether the kernels are compiled for an x86 CPU with AVX2 (which the
    32-byte `_MADD` needs; the 16-byte one needs SSSE3, which every AVX2
    CPU has)."""
    return compiled_with("avx2")


def _byte(context, builder, value, value_type):
    """An integer argument as an i8 (shift counts and masks)."""
    return context.cast(builder, value, value_type, types.uint8)


def _field(builder, packed, shift, mask):
    """``(packed[j] >> shift) & mask`` for every byte of the i8 vector
    `packed`; `shift` and `mask` constants or i8 values."""
    count = packed.type.count

    def lanes(value):
        if isinstance(value, int):
            return constant_splat(I8, count, value)
        return splat(builder, value, count)

    return builder.and_(builder.lshr(packed, lanes(shift)), lanes(mask))


def _bits(context, builder, args, arg_types, count):
    """``(packed[j] >> shift) & mask`` for ``j < count`` from the first three
    arguments ``(packed, shift, mask)``."""
    return _field(
        builder,
        load_vector(builder, args[0], I8, count),
        _byte(context, builder, args[1], arg_types[1]),
        _byte(context, builder, args[2], arg_types[2]),
    )


@intrinsic
def dot_nibble_pairs(typingctx, packed, x):
    """``sum(q[j] * x[j], j < 32)`` where ``q[j]`` is the low nibble of byte
    ``j`` of the 16 bytes at `packed` for ``j < 16`` and the high nibble of
    byte ``j - 16`` after (Q4_0/Q4_1 codes); `x` points at 32 int8 codes."""
    if not integers(packed, x):
        return None

    def codegen(context, builder, signature, args):
        return _dot_unsigned(builder, _nibble_pairs(builder, args[0]), args[1])

    return types.int32(packed, x), codegen


@intrinsic
def dot_nibble_pairs_high(typingctx, packed, high, x):
    """`dot_nibble_pairs` with bit ``j`` of the little-endian uint32 at
    `high` as bit 4 of code ``j`` (Q5_0/Q5_1 codes)."""
    if not integers(packed, high, x):
        return None

    def codegen(context, builder, signature, args):
        codes = _with_high_bits(builder, _nibble_pairs(builder, args[0]), args[1])
        return _dot_unsigned(builder, codes, args[2])

    return types.int32(packed, high, x), codegen


@intrinsic
def dot_signed_32(typingctx, packed, x):
    """``sum(w[j] * x[j], j < 32)`` of two int8 vectors (Q8_0 codes)."""
    if not integers(packed, x):
        return None

    def codegen(context, builder, signature, args):
        wide = vector_type(I32, 32)
        weights = builder.sext(load_vector(builder, args[0], I8, 32), wide)
        x = builder.sext(load_vector(builder, args[1], I8, 32), wide)
        return _reduce_add(builder, builder.mul(weights, x))

    return types.int32(packed, x), codegen


def _dot_bits(count):
    @intrinsic
    def dot_bits(typingctx, packed, shift, mask, x):
        """``sum(((packed[j] >> shift) & mask) * x[j], j < count)``."""
        if not integers(packed, shift, mask, x):
            return None

        def codegen(context, builder, signature, args):
            codes = _bits(context, builder, args, signature.args, count)
            return _dot_unsigned(builder, codes, args[3])

        return types.int32(packed, shift, mask, x), codegen

    return dot_bits


def _dot_bits_high(count):
    @intrinsic
    def dot_bits_high(
        typingctx, packed, shift, mask, high, high_shift, high_mask, position, x
    ):
        """``sum(q[j] * x[j], j < count)`` with ``q[j] = ((packed[j] >> shift)
        & mask) | (((high[j] >> high_shift) & high_mask) << position)``."""
        if not integers(packed, shift, mask, high, high_shift, high_mask, position, x):
            return None

        def codegen(context, builder, signature, args):
            arg_types = signature.args
            codes = _bits(context, builder, args, arg_types, count)
            upper = _bits(context, builder, args[3:6], arg_types[3:6], count)
            position = splat(
                builder, _byte(context, builder, args[6], arg_types[6]), count
            )
            codes = builder.or_(codes, builder.shl(upper, position))
            return _dot_unsigned(builder, codes, args[7])

        signature = types.int32(
            packed, shift, mask, high, high_shift, high_mask, position, x
        )
        return signature, codegen

    return dot_bits_high


dot_bits_16 = _dot_bits(16)
dot_bits_32 = _dot_bits(32)
dot_bits_high_16 = _dot_bits_high(16)
dot_bits_high_32 = _dot_bits_high(32)


@intrinsic
def half_at(typingctx, address):
    """The IEEE half-precision value at `address` (any alignment), as
    float32."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        bits = builder.load(builder.inttoptr(args[0], I16.as_pointer()), align=1)
        return builder.fpext(builder.bitcast(bits, ir.HalfType()), ir.FloatType())

    return types.float32(address), codegen


# Scale decoding shared by dequantisation and the products.


@helper
def k4_scale_min(scales, j):
    """The 6-bit scale and min of group `j` (of 8) of a Q4_K/Q5_K block,
    `scales` its 12 scale bytes."""
    if j < 4:
        return np.int32(scales[j] & 63), np.int32(scales[j + 4] & 63)
    packed = np.int32(scales[j + 4])
    scale = (packed & 15) | ((np.int32(scales[j - 4]) >> 6) << 4)
    minimum = (packed >> 4) | ((np.int32(scales[j]) >> 6) << 4)
    return scale, minimum


@helper
def q3_scale(scales, i):
    """The signed 6-bit scale of group `i` (of 16) of a Q3_K block."""
    if i < 8:
        low = np.int32(scales[i]) & 15
    else:
        low = np.int32(scales[i - 8]) >> 4
    high = (np.int32(scales[8 + i % 4]) >> (2 * (i // 4))) & 3
    return (low | (high << 4)) - 32


# Dequantisation, written as LLVM vector IR like the products: a block's
# codes are unpacked with vector shifts and masks, widened to float32 and
# scaled with the same float32 operations as llama.cpp's reference (a
# multiply, then an add or subtract; no fused multiply-add), so the values
# equal `gguf.quants.dequantize` bit for bit. Each writes float32 values at
# an address (any alignment).


def _store_floats(builder, values, address):
    pointer = builder.inttoptr(address, values.type.as_pointer())
    builder.store(values, pointer, align=1)


def _to_float(builder, codes):
    """Signed i32 codes to a float vector."""
    return builder.sitofp(codes, vector_type(F32, codes.type.count))


def _widen(builder, codes, signed=False):
    wide = vector_type(I32, codes.type.count)
    return builder.sext(codes, wide) if signed else builder.zext(codes, wide)


def _nibble_pairs(builder, address):
    """The 32 unsigned codes of 16 bytes of nibble pairs (low nibbles first)."""
    packed = load_vector(builder, address, I8, 16)
    low = builder.and_(packed, constant_splat(I8, 16, 15))
    high = builder.lshr(packed, constant_splat(I8, 16, 4))
    return builder.shuffle_vector(
        low, high, ir.Constant(vector_type(I32, 32), list(range(32)))
    )


def _with_high_bits(builder, codes, word_address):
    """`codes` with bit ``j`` of the little-endian uint32 at `word_address`
    as bit 4 of code ``j``."""
    # Bit j is bit j % 8 of byte j // 8: each byte copied to eight lanes and
    # tested against its lane's bit (byte shuffles and compares, where
    # shifting a splat word by 32 counts needs 32-bit lanes).
    word = load_vector(builder, word_address, I8, 4)
    spread = builder.shuffle_vector(
        word, word, ir.Constant(vector_type(I32, 32), [j // 8 for j in range(32)])
    )
    lane_bits = ir.Constant(vector_type(I8, 32), [1 << (j % 8) for j in range(32)])
    set_bits = builder.icmp_unsigned(
        "!=", builder.and_(spread, lane_bits), constant_splat(I8, 32, 0)
    )
    high = builder.select(
        set_bits, constant_splat(I8, 32, 16), constant_splat(I8, 32, 0)
    )
    return builder.or_(codes, high)


def _half(builder, address):
    bits = builder.load(builder.inttoptr(address, I16.as_pointer()), align=1)
    return builder.fpext(builder.bitcast(bits, ir.HalfType()), F32)


def _scaled(builder, codes, offset, block, scale_at, min_at=None):
    """``d * float(code - offset) [+ m]`` with the halves at `block` +
    `scale_at` (and `min_at`) for 32 unsigned i8 codes."""
    values = builder.sub(_widen(builder, codes), constant_splat(I32, 32, offset))
    scale = _half(builder, builder.add(block, ir.Constant(block.type, scale_at)))
    result = builder.fmul(splat(builder, scale, 32), _to_float(builder, values))
    if min_at is not None:
        minimum = _half(builder, builder.add(block, ir.Constant(block.type, min_at)))
        result = builder.fadd(result, splat(builder, minimum, 32))
    return result


def _block_dequantizer(build):
    """An intrinsic ``(block, out)`` storing the 32 float32 values
    ``build(builder, block)`` computes."""

    @intrinsic
    def dequantize(typingctx, block, out):
        if not integers(block, out):
            return None

        def codegen(context, builder, signature, args):
            _store_floats(builder, build(builder, args[0]), args[1])
            return context.get_dummy_value()

        return types.void(block, out), codegen

    return dequantize


dequantize_vector_q4_0 = _block_dequantizer(
    lambda b, block: _scaled(b, _nibble_pairs(b, add_offset(b, block, 2)), 8, block, 0)
)
dequantize_vector_q4_1 = _block_dequantizer(
    lambda b, block: _scaled(
        b, _nibble_pairs(b, add_offset(b, block, 4)), 0, block, 0, 2
    )
)
dequantize_vector_q5_0 = _block_dequantizer(
    lambda b, block: _scaled(
        b,
        _with_high_bits(
            b, _nibble_pairs(b, add_offset(b, block, 6)), add_offset(b, block, 2)
        ),
        16,
        block,
        0,
    )
)
dequantize_vector_q5_1 = _block_dequantizer(
    lambda b, block: _scaled(
        b,
        _with_high_bits(
            b, _nibble_pairs(b, add_offset(b, block, 8)), add_offset(b, block, 4)
        ),
        0,
        block,
        0,
        2,
    )
)


def _q8_0_values(builder, block):
    codes = load_vector(builder, add_offset(builder, block, 2), I8, 32)
    scale = _half(builder, block)
    # ``float(q) * d``: the reference's operand order (the product is the
    # same either way).
    return builder.fmul(
        _to_float(builder, _widen(builder, codes, signed=True)),
        splat(builder, scale, 32),
    )


dequantize_vector_q8_0 = _block_dequantizer(_q8_0_values)


def _dequantize_bits(count):
    @intrinsic
    def dequantize_bits(
        typingctx,
        packed,
        shift,
        mask,
        high,
        high_shift,
        high_mask,
        position,
        offset,
        scale,
        minimum,
        out,
    ):
        """Stores ``scale * float(q[j] - offset) - minimum`` for ``j <
        count`` as float32 at `out`, with ``q[j] = ((packed[j] >> shift) &
        mask) | (((high[j] >> high_shift) & high_mask) << position)`` (the
        K-quants' groups; `high_mask` 0 for the formats without high
        bits)."""
        fields = (packed, shift, mask, high, high_shift, high_mask, position)
        if not integers(*fields, offset, out):
            return None
        if not all(isinstance(t, types.Float) for t in (scale, minimum)):
            return None

        def codegen(context, builder, signature, args):
            arg_types = signature.args
            codes = _bits(context, builder, args, arg_types, count)
            upper = _bits(context, builder, args[3:6], arg_types[3:6], count)
            shift = splat(
                builder, _byte(context, builder, args[6], arg_types[6]), count
            )
            codes = _widen(builder, builder.or_(codes, builder.shl(upper, shift)))
            offset = context.cast(builder, args[7], arg_types[7], types.int32)
            codes = builder.sub(codes, splat(builder, offset, count))
            scale = context.cast(builder, args[8], arg_types[8], types.float32)
            minimum = context.cast(builder, args[9], arg_types[9], types.float32)
            values = builder.fsub(
                builder.fmul(splat(builder, scale, count), _to_float(builder, codes)),
                splat(builder, minimum, count),
            )
            _store_floats(builder, values, args[10])
            return context.get_dummy_value()

        return types.void(*fields, offset, scale, minimum, out), codegen

    return dequantize_bits


dequantize_bits_16 = _dequantize_bits(16)
dequantize_bits_32 = _dequantize_bits(32)


def _rounding_store(to_bfloat16):
    @intrinsic
    def round_floats(typingctx, source, target):
        """Rounds the 32 float32 values at `source` to nearest even and
        stores them as 16-bit floats at `target` (NaNs stay quiet NaNs), as
        `dtype_io`'s scalar stores do."""
        if not integers(source, target):
            return None

        def codegen(context, builder, signature, args):
            count = 32
            values = load_vector(builder, args[0], F32, count)
            if to_bfloat16:
                bits = builder.bitcast(values, vector_type(I32, count))
                lower = builder.and_(
                    builder.lshr(bits, constant_splat(I32, count, 16)),
                    constant_splat(I32, count, 1),
                )
                rounded = builder.add(
                    bits, builder.add(lower, constant_splat(I32, count, 0x7FFF))
                )
                quiet = builder.or_(bits, constant_splat(I32, count, 0x400000))
                nan = builder.fcmp_unordered("uno", values, values)
                chosen = builder.select(nan, quiet, rounded)
                result = builder.trunc(
                    builder.lshr(chosen, constant_splat(I32, count, 16)),
                    vector_type(I16, count),
                )
            else:
                result = builder.fptrunc(values, vector_type(ir.HalfType(), count))
            _store_floats(builder, result, args[1])
            return context.get_dummy_value()

        return types.void(source, target), codegen

    return round_floats


_round_floats_float16 = _rounding_store(False)
_round_floats_bfloat16 = _rounding_store(True)


def _named_helper(name: str, intrinsic_function):
    """A helper `name` calling the two-argument `intrinsic_function`.
    Kernels capture these helpers rather than the intrinsics: the on-disk
    cache keys a closure on the captured functions' qualified names, which
    the intrinsics of one factory share."""

    def call(first, second):
        intrinsic_function(first, second)

    call.__name__ = call.__qualname__ = name
    return helper(call)


round_floats_float16 = _named_helper("round_floats_float16", _round_floats_float16)
round_floats_bfloat16 = _named_helper("round_floats_bfloat16", _round_floats_bfloat16)

# One block of `block_elements` values as float32 at address `out`.
dequantize_q4_0 = _named_helper("dequantize_q4_0", dequantize_vector_q4_0)
dequantize_q4_1 = _named_helper("dequantize_q4_1", dequantize_vector_q4_1)
dequantize_q5_0 = _named_helper("dequantize_q5_0", dequantize_vector_q5_0)
dequantize_q5_1 = _named_helper("dequantize_q5_1", dequantize_vector_q5_1)
dequantize_q8_0 = _named_helper("dequantize_q8_0", dequantize_vector_q8_0)


@helper
def dequantize_q2_k(block, out):
    scales = element_array(block, 16, np.uint8)
    d = half_at(block + 80)
    dmin = half_at(block + 82)
    for i in range(16):
        scale = d * np.float32(scales[i] & 15)
        minimum = dmin * np.float32(scales[i] >> 4)
        first = 32 * (i // 8) + 16 * (i % 2)
        shift = 2 * ((i % 8) // 2)
        packed = block + 16 + first
        dequantize_bits_16(
            packed, shift, 3, packed, 0, 0, 0, 0, scale, minimum, out + 64 * i
        )


@helper
def dequantize_q3_k(block, out):
    scales = element_array(block + 96, 12, np.uint8)
    d = half_at(block + 108)
    for i in range(16):
        scale = d * np.float32(q3_scale(scales, i))
        first = 32 * (i // 8) + 16 * (i % 2)
        shift = 2 * ((i % 8) // 2)
        dequantize_bits_16(
            block + 32 + first,
            shift,
            3,
            block + 16 * (i % 2),
            i // 2,
            1,
            2,
            4,
            scale,
            np.float32(0),
            out + 64 * i,
        )


@helper
def dequantize_q4_k(block, out):
    d = half_at(block)
    dmin = half_at(block + 2)
    scales = element_array(block + 4, 12, np.uint8)
    for j in range(8):
        scale_code, min_code = k4_scale_min(scales, j)
        packed = block + 16 + 32 * (j // 2)
        dequantize_bits_32(
            packed,
            4 * (j % 2),
            15,
            packed,
            0,
            0,
            0,
            0,
            d * np.float32(scale_code),
            dmin * np.float32(min_code),
            out + 128 * j,
        )


@helper
def dequantize_q5_k(block, out):
    d = half_at(block)
    dmin = half_at(block + 2)
    scales = element_array(block + 4, 12, np.uint8)
    for j in range(8):
        scale_code, min_code = k4_scale_min(scales, j)
        dequantize_bits_32(
            block + 48 + 32 * (j // 2),
            4 * (j % 2),
            15,
            block + 16,
            j,
            1,
            4,
            0,
            d * np.float32(scale_code),
            dmin * np.float32(min_code),
            out + 128 * j,
        )


@helper
def dequantize_q6_k(block, out):
    scales = element_array(block + 192, 16, np.int8)
    d = half_at(block + 208)
    for j in range(8):
        half = j // 4
        k = j % 4
        first = 64 * half + 32 * (k % 2)
        for side in range(2):
            dequantize_bits_16(
                block + first + 16 * side,
                4 * (k // 2),
                15,
                block + 128 + 32 * half + 16 * side,
                2 * k,
                3,
                4,
                32,
                d * np.float32(scales[2 * j + side]),
                np.float32(0),
                out + 128 * j + 64 * side,
            )


DEQUANTIZE_BLOCK = {
    Q4_0: dequantize_q4_0,
    Q4_1: dequantize_q4_1,
    Q5_0: dequantize_q5_0,
    Q5_1: dequantize_q5_1,
    Q8_0: dequantize_q8_0,
    Q2_K: dequantize_q2_k,
    Q3_K: dequantize_q3_k,
    Q4_K: dequantize_q4_k,
    Q5_K: dequantize_q5_k,
    Q6_K: dequantize_q6_k,
}


@cache
def dequantize_kernel(quant_type: int, dtype: str, parallel: bool):
    """``run(weight, weight_stride, out, out_stride, rows, cols, chunks,
    scratch)``: dequantises `rows` rows of `cols` values (addresses; strides
    in bytes for `weight`, elements for `out`) in `chunks` chunks of rows.
    float32 values go straight into `out`; for 16-bit outputs each row is
    dequantised into chunk ``c``'s float32 row at ``scratch + 4 * c * cols``
    first (``chunks * cols`` floats; unused for float32), then rounded into
    `out` 32 values at a time."""
    entry = GGML_TYPES[quant_type]
    block_elements = entry.block_elements
    block_bytes = entry.block_bytes
    block_out_bytes = 4 * block_elements
    dequantize_block = DEQUANTIZE_BLOCK[quant_type]
    direct = dtype == "float32"
    round_floats = (
        round_floats_bfloat16 if dtype == "bfloat16" else round_floats_float16
    )

    def run(
        weight, weight_stride, out_address, out_stride, rows, cols, chunks, scratch
    ):
        blocks = cols // block_elements
        for chunk in prange(chunks):
            for row in range(chunk * rows // chunks, (chunk + 1) * rows // chunks):
                source = weight + row * weight_stride
                if direct:
                    target = out_address + 4 * row * out_stride
                else:
                    target = scratch + 4 * chunk * cols
                for block in range(blocks):
                    dequantize_block(
                        source + block * block_bytes,
                        target + block * block_out_bytes,
                    )
                if not direct:
                    first = out_address + 2 * row * out_stride
                    for at in range(0, cols, 32):
                        round_floats(target + 4 * at, first + 2 * at)
        return 0

    return kernel(run, parallel=parallel)


# Products. A dot helper takes ``(block, x, scales, block_sums, sums, k)``:
# the block's address, the address of the activation codes of its first
# value, the activation row's per-32 scales and ``scale * sum(codes)`` and
# per-16 code sums, and the index `k` of the block's first group of 32 in
# the row. It returns the block's float32 contribution to the dot product.


@helper
def dot_q4_0(block, x, scales, block_sums, sums, k):
    codes = dot_nibble_pairs(block + 2, x)
    offset = 8 * (sums[2 * k] + sums[2 * k + 1])
    return half_at(block) * scales[k] * np.float32(codes - offset)


@helper
def dot_q4_1(block, x, scales, block_sums, sums, k):
    codes = dot_nibble_pairs(block + 4, x)
    return (
        half_at(block) * scales[k] * np.float32(codes)
        + half_at(block + 2) * block_sums[k]
    )


@helper
def dot_q5_0(block, x, scales, block_sums, sums, k):
    codes = dot_nibble_pairs_high(block + 6, block + 2, x)
    offset = 16 * (sums[2 * k] + sums[2 * k + 1])
    return half_at(block) * scales[k] * np.float32(codes - offset)


@helper
def dot_q5_1(block, x, scales, block_sums, sums, k):
    codes = dot_nibble_pairs_high(block + 8, block + 4, x)
    return (
        half_at(block) * scales[k] * np.float32(codes)
        + half_at(block + 2) * block_sums[k]
    )


@helper
def dot_q8_0(block, x, scales, block_sums, sums, k):
    return half_at(block) * scales[k] * np.float32(dot_signed_32(block + 2, x))


@helper
def dot_q2_k(block, x, scales, block_sums, sums, k):
    scale_bytes = element_array(block, 16, np.uint8)
    packed = block + 16
    total = np.float32(0)
    for g in range(8):
        scaled = np.int32(0)
        offsets = np.int32(0)
        for i in range(2 * g, 2 * g + 2):
            first = 32 * (i // 8) + 16 * (i % 2)
            shift = 2 * ((i % 8) // 2)
            codes = dot_bits_16(packed + first, shift, 3, x + 16 * i)
            byte = np.int32(scale_bytes[i])
            scaled += (byte & 15) * codes
            offsets += (byte >> 4) * sums[2 * k + i]
        total += scales[k + g] * (
            half_at(block + 80) * np.float32(scaled)
            - half_at(block + 82) * np.float32(offsets)
        )
    return total


@helper
def dot_q3_k(block, x, scales, block_sums, sums, k):
    high = block
    packed = block + 32
    scale_bytes = element_array(block + 96, 12, np.uint8)
    total = np.float32(0)
    for g in range(8):
        scaled = np.int32(0)
        for i in range(2 * g, 2 * g + 2):
            first = 32 * (i // 8) + 16 * (i % 2)
            shift = 2 * ((i % 8) // 2)
            codes = dot_bits_high_16(
                packed + first, shift, 3, high + 16 * (i % 2), g, 1, 2, x + 16 * i
            )
            scaled += q3_scale(scale_bytes, i) * (codes - 4 * sums[2 * k + i])
        total += scales[k + g] * np.float32(scaled)
    return half_at(block + 108) * total


@helper
def dot_q4_k(block, x, scales, block_sums, sums, k):
    scale_bytes = element_array(block + 4, 12, np.uint8)
    scaled = np.float32(0)
    offsets = np.float32(0)
    for j in range(8):
        scale_code, min_code = k4_scale_min(scale_bytes, j)
        codes = dot_bits_32(block + 16 + 32 * (j // 2), 4 * (j % 2), 15, x + 32 * j)
        scaled += scales[k + j] * np.float32(scale_code * codes)
        offsets += block_sums[k + j] * np.float32(min_code)
    return half_at(block) * scaled - half_at(block + 2) * offsets


@helper
def dot_q5_k(block, x, scales, block_sums, sums, k):
    scale_bytes = element_array(block + 4, 12, np.uint8)
    scaled = np.float32(0)
    offsets = np.float32(0)
    for j in range(8):
        scale_code, min_code = k4_scale_min(scale_bytes, j)
        codes = dot_bits_high_32(
            block + 48 + 32 * (j // 2), 4 * (j % 2), 15, block + 16, j, 1, 4, x + 32 * j
        )
        scaled += scales[k + j] * np.float32(scale_code * codes)
        offsets += block_sums[k + j] * np.float32(min_code)
    return half_at(block) * scaled - half_at(block + 2) * offsets


@helper
def dot_q6_k(block, x, scales, block_sums, sums, k):
    scale_bytes = element_array(block + 192, 16, np.int8)
    total = np.float32(0)
    for j in range(8):
        half = j // 4
        part = j % 4
        low = block + 64 * half + 32 * (part % 2)
        high = block + 128 + 32 * half
        shift = 4 * (part // 2)
        scaled = np.int32(0)
        for side in range(2):
            codes = dot_bits_high_16(
                low + 16 * side,
                shift,
                15,
                high + 16 * side,
                2 * part,
                3,
                4,
                x + 32 * j + 16 * side,
            )
            offset = 32 * sums[2 * (k + j) + side]
            scaled += np.int32(scale_bytes[2 * j + side]) * (codes - offset)
        total += scales[k + j] * np.float32(scaled)
    return half_at(block + 208) * total


DOT_BLOCK = {
    Q4_0: dot_q4_0,
    Q4_1: dot_q4_1,
    Q5_0: dot_q5_0,
    Q5_1: dot_q5_1,
    Q8_0: dot_q8_0,
    Q2_K: dot_q2_k,
    Q3_K: dot_q3_k,
    Q4_K: dot_q4_k,
    Q5_K: dot_q5_k,
    Q6_K: dot_q6_k,
}


# Whole weight rows in one loop of vector IR (`DOT_ROW`). Each group of 32
# codes meets its 32 activation codes in eight int32 lane sums (lane i sums
# codes 4i to 4i + 3), which are not added up: they are scaled by the
# group's float32 factor (or one factor per half, Q6_K's 16-code scales) and
# added to a float32 vector, summed once per row. Reducing every group to
# one integer first (`DOT_BLOCK`) costs a horizontal sum and scalar float
# work per group: most of a decode step's product time.
_ROW_LANES = 8


def _lane_sums(builder, codes, x_address, signed=False):
    """``codes[j] * x[j]`` for 32 i8 codes and the 32 int8 activation codes
    at `x_address`, summed into eight int32 lanes: for unsigned codes lane
    ``i`` sums products ``4i`` to ``4i + 3`` (Q6_K scales the two halves
    apart); signed codes (Q8_0, one factor per group) mix positions."""
    x = load_vector(builder, x_address, I8, 32)
    if not x86_madd_instructions():
        products = builder.mul(_widen(builder, codes, signed), _widen(builder, x, True))
        quarters = [
            builder.shuffle_vector(
                products,
                products,
                ir.Constant(vector_type(I32, 8), list(range(first, 32, 4))),
            )
            for first in range(4)
        ]
        return builder.add(
            builder.add(quarters[0], quarters[1]), builder.add(quarters[2], quarters[3])
        )
    if not signed:
        return _madd(builder, codes, x)
    # Four instructions where widening both to 16 bits takes nine.
    return _madd(builder, *signs_moved(builder, codes, x))


def signs_moved(builder, codes, x):
    """``(|codes|, sign(codes) * x)`` for 32 signed i8 codes (AVX2
    `psignb`): ``q * x = |q| * (sign(q) x)``, so the unsigned-by-signed
    byte multiply-add takes signed codes. |q| <= 128 (-128 reads as the
    unsigned 128) times activations of at most 127 in magnitude stays
    within the 16-bit pair sums."""
    sign = declare(builder, "llvm.x86.avx2.psign.b", codes.type, [codes.type] * 2)
    return builder.call(sign, [codes, codes]), builder.call(sign, [x, codes])


def _load_scalar(builder, address, scalar_type):
    return builder.load(builder.inttoptr(address, scalar_type.as_pointer()), align=1)


class _Group:
    """Where a block's activation data are: the codes of the block's first
    group at `x`, and that group's entries of `quantize_activations`'
    scratch (`scales`, `sums` two per group, `block_sums`)."""

    def __init__(self, x, scales, sums, block_sums):
        self.x, self.scales, self.sums, self.block_sums = x, scales, sums, block_sums

    def codes(self, builder, group):
        return add_offset(builder, self.x, ACTIVATION_BLOCK * group)

    def scale(self, builder, group):
        return _load_scalar(builder, add_offset(builder, self.scales, 4 * group), F32)

    def block_sum(self, builder, group):
        return _load_scalar(
            builder, add_offset(builder, self.block_sums, 4 * group), F32
        )

    def half_sum(self, builder, half):
        """The sum of the codes of half `half` (16 codes) from the first
        group."""
        return _load_scalar(builder, add_offset(builder, self.sums, 4 * half), I32)


def _minus_in_lanes(builder, lanes, offsets):
    """`lanes` less each ``(lane, value)`` of `offsets` in that lane."""
    vector = ir.Constant(lanes.type, [0] * _ROW_LANES)
    for lane, value in offsets:
        vector = builder.insert_element(vector, value, I32(lane))
    return builder.sub(lanes, vector)


def _simple_terms(codes_of, min_at, code_offset, signed=False):
    """The terms of a 32-element block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0):
    ``d * x_scale * sum((q - offset) * x)`` and, with a minimum,
    ``m * d_x * sum(x)``."""

    def terms(builder, block, group):
        x = group.codes(builder, 0)
        lanes = _lane_sums(builder, codes_of(builder, block), x, signed)
        if code_offset:
            # sum((q - offset) * x) = sum(q * x) - offset * sum(x).
            total = builder.add(group.half_sum(builder, 0), group.half_sum(builder, 1))
            lanes = _minus_in_lanes(
                builder, lanes, [(0, builder.mul(total, I32(code_offset)))]
            )
        factor = builder.fmul(_half(builder, block), group.scale(builder, 0))
        minimum = None
        if min_at is not None:
            minimum = builder.fmul(
                _half(builder, add_offset(builder, block, min_at)),
                group.block_sum(builder, 0),
            )
        return [(lanes, factor)], minimum

    return terms


def _k4_scale_min(builder, scale_bytes, j):
    """IR of `k4_scale_min`: the 6-bit scale and min (i32) of group `j`."""

    def byte(index):
        return builder.zext(
            _load_scalar(builder, add_offset(builder, scale_bytes, index), I8), I32
        )

    if j < 4:
        return (
            builder.and_(byte(j), I32(63)),
            builder.and_(byte(j + 4), I32(63)),
        )
    packed = byte(j + 4)
    scale = builder.or_(
        builder.and_(packed, I32(15)),
        builder.shl(builder.lshr(byte(j - 4), I32(6)), I32(4)),
    )
    minimum = builder.or_(
        builder.lshr(packed, I32(4)),
        builder.shl(builder.lshr(byte(j), I32(6)), I32(4)),
    )
    return scale, minimum


def _k_terms(high_bits):
    """The terms of a Q4_K (``high_bits`` False) or Q5_K block: eight groups
    of 32 with 6-bit scales and mins, ``d * sum(scale_j * x_scale_j *
    sum(q * x)) - dmin * sum(min_j * d_x_j * sum(x_j))``."""
    codes_at = 48 if high_bits else 16

    def terms(builder, block, group):
        d = _half(builder, block)
        scale_bytes = add_offset(builder, block, 4)
        result = []
        offsets = F32(0.0)
        for j in range(8):
            packed = load_vector(
                builder, add_offset(builder, block, codes_at + 32 * (j // 2)), I8, 32
            )
            codes = _field(builder, packed, 4 * (j % 2), 15)
            if high_bits:
                high = load_vector(builder, add_offset(builder, block, 16), I8, 32)
                high = _field(builder, high, j, 1)
                codes = builder.or_(codes, builder.shl(high, constant_splat(I8, 32, 4)))
            x = group.codes(builder, j)
            lanes = _lane_sums(builder, codes, x)
            scale, minimum = _k4_scale_min(builder, scale_bytes, j)
            factor = builder.fmul(
                builder.fmul(d, builder.sitofp(scale, F32)), group.scale(builder, j)
            )
            result.append((lanes, factor))
            offsets = builder.fadd(
                offsets,
                builder.fmul(group.block_sum(builder, j), builder.sitofp(minimum, F32)),
            )
        dmin = _half(builder, add_offset(builder, block, 2))
        return result, builder.fneg(builder.fmul(dmin, offsets))

    return terms


def _q6_k_terms(builder, block, group):
    """The terms of a Q6_K block: eight groups of 32 6-bit codes with offset
    32 and a signed 8-bit scale per 16, ``d * sum(x_scale_j * sum over the
    halves of scale_h * sum((q - 32) * x))``."""
    d = _half(builder, add_offset(builder, block, 208))
    result = []
    for j in range(8):
        half, part = divmod(j, 4)
        low = load_vector(
            builder, add_offset(builder, block, 64 * half + 32 * (part % 2)), I8, 32
        )
        high = load_vector(builder, add_offset(builder, block, 128 + 32 * half), I8, 32)
        codes = builder.or_(
            _field(builder, low, 4 * (part // 2), 15),
            builder.shl(_field(builder, high, 2 * part, 3), constant_splat(I8, 32, 4)),
        )
        x = group.codes(builder, j)
        lanes = _lane_sums(builder, codes, x)
        # Lanes 0-3 are the first 16 codes, lanes 4-7 the second.
        sums = [group.half_sum(builder, 2 * j + side) for side in range(2)]
        lanes = _minus_in_lanes(
            builder,
            lanes,
            [(4 * side, builder.mul(sums[side], I32(32))) for side in range(2)],
        )
        scales = [
            builder.sitofp(
                _load_scalar(
                    builder, add_offset(builder, block, 192 + 2 * j + side), I8
                ),
                F32,
            )
            for side in range(2)
        ]
        common = builder.fmul(d, group.scale(builder, j))
        pair = ir.Constant(vector_type(F32, 2), [0.0, 0.0])
        for side in range(2):
            pair = builder.insert_element(pair, scales[side], I32(side))
        pair = builder.fmul(pair, splat(builder, common, 2))
        factor = builder.shuffle_vector(
            pair,
            pair,
            ir.Constant(vector_type(I32, _ROW_LANES), [lane // 4 for lane in range(8)]),
        )
        result.append((lanes, factor))
    return result, None


def _nibble_pair_codes(at, high_at=None):
    def codes(builder, block):
        values = _nibble_pairs(builder, add_offset(builder, block, at))
        if high_at is not None:
            values = _with_high_bits(
                builder, values, add_offset(builder, block, high_at)
            )
        return values

    return codes


# ``(block bytes, blocks per loop step, terms(builder, block, group) ->
# ([(int32 lanes, float32 factor or factor vector)], float32 term or None))``.
_ROW_LAYOUTS = {
    Q4_0: (18, 2, _simple_terms(_nibble_pair_codes(2), None, 8)),
    Q4_1: (20, 2, _simple_terms(_nibble_pair_codes(4), 2, 0)),
    Q5_0: (22, 2, _simple_terms(_nibble_pair_codes(6, 2), None, 16)),
    Q5_1: (24, 2, _simple_terms(_nibble_pair_codes(8, 4), 2, 0)),
    Q8_0: (
        34,
        2,
        _simple_terms(
            lambda b, block: load_vector(b, add_offset(b, block, 2), I8, 32),
            None,
            0,
            signed=True,
        ),
    ),
    Q4_K: (144, 1, _k_terms(high_bits=False)),
    Q5_K: (176, 1, _k_terms(high_bits=True)),
    Q6_K: (210, 1, _q6_k_terms),
}


def _row_dot(quant_type):
    block_bytes, per_step, terms = _ROW_LAYOUTS[quant_type]
    block_elements = GGML_TYPES[quant_type].block_elements
    groups_per_block = block_elements // ACTIVATION_BLOCK

    @intrinsic
    def dot_row(typingctx, block, x, scales, sums, block_sums, steps):
        """`DOT_BLOCK`'s sum over ``per_step * steps`` blocks of a weight row
        from `block`, with the activation codes at `x` and the activation
        groups' `scales`, `sums` and `block_sums` at those addresses
        (`quantize_activations`' scratch, from the row's first group)."""
        if not integers(block, x, scales, sums, block_sums, steps):
            return None

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            block, x, scales, sums, block_sums, steps = (
                context.cast(builder, value, value_type, types.int64)
                for value, value_type in zip(args, signature.args, strict=True)
            )
            vector = vector_type(F32, _ROW_LANES)
            zero = ir.Constant(vector, [0.0] * _ROW_LANES)
            fmuladd = declare(
                builder, f"llvm.fmuladd.v{_ROW_LANES}f32", vector, [vector] * 3
            )

            def run(index, carried):
                # Two vector sums, taking the terms in turn: each term's
                # multiply-add then overlaps the next one's.
                running = carried[:2]
                running_scalar = carried[2]
                term_count = 0
                for side in range(per_step):
                    number = builder.add(builder.mul(index, i64(per_step)), i64(side))
                    first_group = builder.mul(number, i64(groups_per_block))
                    group = _Group(
                        builder.add(x, builder.mul(first_group, i64(ACTIVATION_BLOCK))),
                        builder.add(scales, builder.mul(first_group, i64(4))),
                        builder.add(sums, builder.mul(first_group, i64(8))),
                        builder.add(block_sums, builder.mul(first_group, i64(4))),
                    )
                    address = builder.add(block, builder.mul(number, i64(block_bytes)))
                    products, extra = terms(builder, address, group)
                    for lanes, factor in products:
                        if not isinstance(factor.type, ir.VectorType):
                            factor = splat(builder, factor, _ROW_LANES)
                        which = term_count % 2
                        running[which] = builder.call(
                            fmuladd, [_to_float(builder, lanes), factor, running[which]]
                        )
                        term_count += 1
                    if extra is not None:
                        running_scalar = builder.fadd(running_scalar, extra)
                return [*running, running_scalar]

            results = carried_loop(builder, steps, "row", [zero, zero, F32(0.0)], run)
            total = float_total(builder, builder.fadd(results[0], results[1]))
            return builder.fadd(total, results[2])

        return types.float32(block, x, scales, sums, block_sums, steps), codegen

    return dot_row, per_step


DOT_ROW = {quant_type: _row_dot(quant_type) for quant_type in _ROW_LAYOUTS}


def _group_quantizer(source):
    @intrinsic
    def quantize_group(typingctx, x, codes, scale, sums, block_sum):
        """Quantises the 32 activations at address `x` (dtype `source`):
        ``d = absmax / 127`` at `scale` (NaN where a value is not finite),
        the codes ``round(x / d)`` (float32 division, halves away from
        zero; 0 where ``d`` is not above 0) as int8 at `codes`, the sums of
        each 16 codes (int32) at `sums` and ``d * sum(codes)`` at
        `block_sum`."""
        if not integers(x, codes, scale, sums, block_sum):
            return None

        def codegen(context, builder, signature, args):
            x, codes, scale, sums, block_sum = args
            count = 32
            floats = vector_type(F32, count)
            values = _load_floats(builder, x, source)
            magnitudes = _vector_intrinsic(builder, "llvm.fabs", values)
            # The largest magnitude as the largest bit pattern (the order of
            # non-negative floats): a float maximum that must keep NaNs
            # compiles to a scalar chain, and NaNs are caught below.
            bits = vector_type(I32, count)
            reduce_max = declare(builder, "llvm.vector.reduce.umax.v32i32", I32, [bits])
            largest = builder.bitcast(
                builder.call(reduce_max, [builder.bitcast(magnitudes, bits)]), F32
            )
            # NaN or infinite (unordered or above the largest float).
            wrong = builder.fcmp_unordered(
                ">", magnitudes, ir.Constant(floats, [3.4028235e38] * count)
            )
            any_wrong = builder.call(
                declare(
                    builder,
                    "llvm.vector.reduce.or.v32i1",
                    ir.IntType(1),
                    [wrong.type],
                ),
                [wrong],
            )
            d = builder.select(
                any_wrong,
                ir.Constant(F32, float("nan")),
                builder.fdiv(largest, ir.Constant(F32, 127.0)),
            )
            positive = builder.fcmp_ordered(">", d, ir.Constant(F32, 0.0))
            zeros = ir.Constant(floats, [0.0] * count)
            ratio = builder.select(
                positive, builder.fdiv(values, splat(builder, d, count)), zeros
            )
            # `llvm.round` rounds halves away from zero (C's `roundf`); x86
            # lowers it to an add and a truncation, where the truncation,
            # remainder, compare and select it stands for took a fourth of
            # the group's time.
            rounded = _vector_intrinsic(builder, "llvm.round", ratio)
            words = builder.fptosi(rounded, vector_type(I32, count))
            code_bytes = builder.trunc(words, vector_type(I8, count))
            pointer = builder.inttoptr(codes, code_bytes.type.as_pointer())
            builder.store(code_bytes, pointer, align=1)
            halves = _half_sums(builder, words, code_bytes)
            for offset, total in zip((0, 4), halves, strict=True):
                at = builder.inttoptr(
                    add_offset(builder, sums, offset), I32.as_pointer()
                )
                builder.store(total, at, align=4)
            builder.store(d, builder.inttoptr(scale, F32.as_pointer()), align=4)
            product = builder.fmul(
                d, builder.sitofp(builder.add(halves[0], halves[1]), F32)
            )
            builder.store(
                product, builder.inttoptr(block_sum, F32.as_pointer()), align=4
            )
            return context.get_dummy_value()

        return types.void(x, codes, scale, sums, block_sum), codegen

    return quantize_group


def _named_group_quantizer(source):
    """A helper calling `_group_quantizer(source)` (named for the cache, as
    `_named_helper`'s)."""
    quantize_group = _group_quantizer(source)

    def call(x, codes, scale, sums, block_sum):
        quantize_group(x, codes, scale, sums, block_sum)

    call.__name__ = call.__qualname__ = f"quantize_group_{source}"
    return helper(call)


# Per loader (`dtype_io.loader`): the group quantizer of its dtype.
_GROUP_QUANTIZERS = {
    loader(dtype): _named_group_quantizer(dtype)
    for dtype in ("float32", "float16", "bfloat16")
}


def quantize_group(load, x, codes, scale, sums, block_sum):
    """`_group_quantizer` of the dtype `load` reads (kernels only)."""
    raise NotImplementedError("quantize_group runs inside kernels only")


@overload(quantize_group, inline="always")
def _quantize_group_overload(load, x, codes, scale, sums, block_sum):
    quantizer = _GROUP_QUANTIZERS[load.dispatcher]

    def implementation(load, x, codes, scale, sums, block_sum):
        quantizer(x, codes, scale, sums, block_sum)

    return implementation


@helper
def quantize_activations(x, start, cols, load, codes, at, scales, block_sums, sums, k):
    """Quantises `cols` values of `x` from `start` into int8 `codes` from
    `at`: per block of 32 values the scale ``d = absmax / 127`` into
    `scales`, the codes, ``d * sum(codes)`` into `block_sums` and the sums of
    each 16 codes into `sums`, from group `k` (`_group_quantizer`, 32 values
    a vector at a time)."""
    x_at = x.ctypes.data + start * x.itemsize
    codes_at = codes.ctypes.data + at
    scales_at = scales.ctypes.data + 4 * k
    block_sums_at = block_sums.ctypes.data + 4 * k
    sums_at = sums.ctypes.data + 8 * k
    for group in range(cols // ACTIVATION_BLOCK):
        quantize_group(
            load,
            x_at + ACTIVATION_BLOCK * x.itemsize * group,
            codes_at + ACTIVATION_BLOCK * group,
            scales_at + 4 * group,
            sums_at + 8 * group,
            block_sums_at + 4 * group,
        )


@helper
def quantize_tokens(
    x, x_stride, cols, load, codes, scales, block_sums, sums, first, last
):
    """`quantize_activations` of tokens `first` to `last` (rows `x_stride`
    apart), each into its own stretch of the scratch."""
    groups = cols // ACTIVATION_BLOCK
    for token in range(first, last):
        quantize_activations(
            x,
            token * x_stride,
            cols,
            load,
            codes,
            token * cols,
            scales,
            block_sums,
            sums,
            token * groups,
        )


@helper
def quantize_batch(x, x_stride, tokens, cols, load, codes, scales, block_sums, sums):
    """`activation_scratch` at those addresses, filled with the quantised
    rows of `x` (`quantize_tokens`) and returned."""
    codes, scales, block_sums, sums = activation_scratch(
        tokens, cols, codes, scales, block_sums, sums
    )
    if tokens <= SERIAL_QUANTIZE_TOKENS:
        # A few tokens quantise in less time than a parallel region takes
        # to open: the products' region is then the call's only.
        quantize_tokens(
            x, x_stride, cols, load, codes, scales, block_sums, sums, 0, tokens
        )
    else:
        for token in prange(tokens):
            quantize_tokens(
                x, x_stride, cols, load, codes, scales, block_sums, sums,
                token, token + 1,
            )  # fmt: skip
    return codes, scales, block_sums, sums


@helper
def activation_scratch(tokens, cols, codes, scales, block_sums, sums):
    """The arrays of `quantize_activations`' scratch at those addresses:
    codes (int8, ``tokens * cols``), scales and block sums (float32, one per
    group of 32) and sums (int32, two per group)."""
    groups = tokens * (cols // ACTIVATION_BLOCK)
    return (
        element_array(codes, tokens * cols, np.int8),
        element_array(scales, groups, np.float32),
        element_array(block_sums, groups, np.float32),
        element_array(sums, 2 * groups, np.int32),
    )


def _row_total(quant_type):
    """``row_total(source, x_codes, blocks, scales, block_sums, sums,
    group)``: the dot product of the weight row at `source` (`blocks`
    blocks) with one token's codes at `x_codes`, its activation groups from
    `group`."""
    entry = GGML_TYPES[quant_type]
    block_elements = entry.block_elements
    block_bytes = entry.block_bytes
    groups_per_block = block_elements // ACTIVATION_BLOCK
    dot_block = DOT_BLOCK[quant_type]
    dot_row, per_step = DOT_ROW.get(quant_type, (None, 1))

    @helper
    def one_block(source, x_codes, block, scales, block_sums, sums, group):
        return dot_block(
            source + block * block_bytes,
            x_codes + block * block_elements,
            scales,
            block_sums,
            sums,
            group + block * groups_per_block,
        )

    if dot_row is not None:

        @helper
        def row_total(source, x_codes, blocks, scales, block_sums, sums, group):
            total = dot_row(
                source,
                x_codes,
                scales.ctypes.data + 4 * group,
                sums.ctypes.data + 8 * group,
                block_sums.ctypes.data + 4 * group,
                blocks // per_step,
            )
            if blocks % per_step:
                total += one_block(
                    source, x_codes, blocks - 1, scales, block_sums, sums, group
                )
            return total

        return row_total

    @helper
    def row_total(source, x_codes, blocks, scales, block_sums, sums, group):
        # Two running sums: each block's float work then overlaps the next
        # block's instead of waiting on it.
        even = np.float32(0)
        odd = np.float32(0)
        for pair in range(blocks // 2):
            block = 2 * pair
            even += one_block(source, x_codes, block, scales, block_sums, sums, group)
            odd += one_block(
                source, x_codes, block + 1, scales, block_sums, sums, group
            )
        if blocks % 2:
            even += one_block(
                source, x_codes, blocks - 1, scales, block_sums, sums, group
            )
        return even + odd

    return row_total


# Output rows computed together for one token: their weight rows stay in
# the L1 cache while every token passes over them.
TILE_ROWS = 8
# Tokens up to which a product quantises its activations on the calling
# thread (a decode batch: at most 8 x 2,048 values, a few microseconds).
SERIAL_QUANTIZE_TOKENS = 8


@cache
def product_kernel(quant_type: int, dtype: str, parallel: bool):
    """``run(weight, weight_stride, x, x_stride, out, out_stride, tokens,
    rows, cols, codes, scales, block_sums, sums, chunks)``: ``out[t, r] =
    sum over blocks of dot(weight row r, quantised x row t)`` for `rows`
    rows in `chunks` parallel chunks (addresses; strides in bytes for
    `weight`, in elements for `x` and `out`). `codes` (int8, ``tokens *
    cols``), `scales` and `block_sums` (float32, ``tokens * cols / 32``) and
    `sums` (int32, ``tokens * cols / 16``) are scratch for the quantised
    activations."""
    block_elements = GGML_TYPES[quant_type].block_elements
    row_total = _row_total(quant_type)
    storage = STORAGE[dtype]
    load = loader(dtype)
    store = storer(dtype)
    tile_rows = TILE_ROWS

    def run(
        weight,
        weight_stride,
        x_address,
        x_stride,
        out_address,
        out_stride,
        tokens,
        rows,
        cols,
        codes_address,
        scales_address,
        block_sums_address,
        sums_address,
        chunks,
    ):
        x = element_array(x_address, (tokens - 1) * x_stride + cols, storage)
        out = element_array(out_address, (tokens - 1) * out_stride + rows, storage)
        codes, scales, block_sums, sums = quantize_batch(
            x,
            x_stride,
            tokens,
            cols,
            load,
            codes_address,
            scales_address,
            block_sums_address,
            sums_address,
        )
        groups = cols // ACTIVATION_BLOCK
        blocks = cols // block_elements
        tiles = (rows + tile_rows - 1) // tile_rows
        for chunk in prange(chunks):
            for tile in range(chunk * tiles // chunks, (chunk + 1) * tiles // chunks):
                first = tile * tile_rows
                last = min(first + tile_rows, rows)
                for token in range(tokens):
                    x_codes = codes_address + token * cols
                    group = token * groups
                    for row in range(first, last):
                        total = row_total(
                            weight + row * weight_stride,
                            x_codes,
                            blocks,
                            scales,
                            block_sums,
                            sums,
                            group,
                        )
                        store(out, token * out_stride + row, total)
        return 0

    return kernel(run, parallel=parallel)


# Weight bytes times tokens below which a product runs serially: waking the
# thread pool (a few microseconds) costs more than it saves on a small
# matrix. At one token on two threads, 128 KiB puts every SmolLM2 product
# (200 KiB to 1.1 MiB of Q4_1) in parallel: 0.76x the serial time for
# (576, 576), 0.55x for (3072, 576); the old 2 MiB left them all serial.
PARALLEL_WORK = 1 << 17
# Parallel chunks per thread (the tiles are split evenly among them).
CHUNKS_PER_THREAD = 4


class ProductPlan:
    """The launch of a product for one geometry: the kernel, the strides and
    the scratch holding the quantised activations (the dispatcher keeps an
    operator per thread, so the scratch is never shared between threads)."""

    # The kernel factory (`product_kernel`'s arguments) and the output rows
    # a kernel tile computes together.
    kernel = staticmethod(product_kernel)
    tile_rows = TILE_ROWS

    def __init__(self, quant_type: int, weight, x, out, rows: int) -> None:
        import numba

        tokens, cols = x.shape
        entry = GGML_TYPES[quant_type]
        groups = cols // ACTIVATION_BLOCK
        work = rows * cols // entry.block_elements * entry.block_bytes * tokens
        tiles = -(-rows // self.tile_rows)
        parallel = work >= PARALLEL_WORK and tiles > 1
        chunks = (
            min(tiles, CHUNKS_PER_THREAD * numba.get_num_threads()) if parallel else 1
        )
        self.codes = np.zeros(max(1, tokens * cols), np.int8)
        self.scales = np.zeros(max(1, tokens * groups), np.float32)
        self.block_sums = np.zeros(max(1, tokens * groups), np.float32)
        self.sums = np.zeros(max(1, 2 * tokens * groups), np.int32)
        self.empty = tokens == 0 or rows == 0
        self.run = self.kernel(quant_type, x.dtype, parallel)
        self.weight_stride = weight.strides[0]
        self.x_stride = x.strides[0]
        self.out_stride = out.strides[0]
        self.tail = (
            tokens,
            rows,
            cols,
            self.codes.ctypes.data,
            self.scales.ctypes.data,
            self.block_sums.ctypes.data,
            self.sums.ctypes.data,
            *self.kernel_scratch(tokens, chunks),
            chunks,
        )

    def kernel_scratch(self, tokens: int, chunks: int) -> tuple:
        """Addresses of the kernel's own scratch, after the activations'."""
        del tokens, chunks  # `product_kernel` has none.
        return ()

    def bind(self, weight, x, out):
        """`launch` on these tensors as a callable of no arguments."""
        if self.empty:
            return do_nothing
        return bound(self.run, *self.arguments(weight, x, out))

    def arguments(self, weight, x, out) -> tuple:
        """The kernel's arguments."""
        return (
            weight.data_ptr(),
            self.weight_stride,
            x.data_ptr(),
            self.x_stride,
            out.data_ptr(),
            self.out_stride,
            *self.tail,
        )

    def launch(self, weight, x, out) -> None:
        if not self.empty:
            self.run(*self.arguments(weight, x, out))


def _load_floats(builder, address, source):
    """32 values of dtype `source` at `address` as a float32 vector."""
    if source == "float32":
        return load_vector(builder, address, F32, 32)
    if source == "float16":
        halves = load_vector(builder, address, ir.HalfType(), 32)
        return builder.fpext(halves, vector_type(F32, 32))
    bits = builder.zext(load_vector(builder, address, I16, 32), vector_type(I32, 32))
    bits = builder.shl(bits, constant_splat(I32, 32, 16))
    return builder.bitcast(bits, vector_type(F32, 32))


# What flipping an int8's top bit (``q ^ 0x80``) adds to it, the result
# read as unsigned: ``q + 128``.
SIGNED_BIAS = 128


def _half_sums(builder, words, code_bytes):
    """The sums of the first and of the last 16 of 32 codes (int32), given
    as int32 `words` and as the int8 `code_bytes`. With AVX2 one `vpsadbw`
    sums each eight codes (biased to unsigned, the bias taken off after):
    the two 16-lane reductions of `words` cost a third of the group's
    quantisation."""
    if not compiled_with("avx2"):
        return [
            _reduce_add(
                builder,
                builder.shuffle_vector(
                    words,
                    words,
                    ir.Constant(vector_type(I32, 16), list(range(start, start + 16))),
                ),
            )
            for start in (0, 16)
        ]
    octets = vector_type(I64, 4)
    sad = declare(
        builder, "llvm.x86.avx2.psad.bw", octets, [code_bytes.type, code_bytes.type]
    )
    biased = builder.xor(code_bytes, constant_splat(I8, 32, -SIGNED_BIAS))
    totals = builder.call(sad, [biased, constant_splat(I8, 32, 0)])
    halves = []
    for first in (0, 2):
        pair = builder.add(
            builder.extract_element(totals, I32(first)),
            builder.extract_element(totals, I32(first + 1)),
        )
        halves.append(builder.sub(builder.trunc(pair, I32), I32(16 * SIGNED_BIAS)))
    return halves


def _vector_intrinsic(builder, name, vector):
    """``name(vector)`` for an overloaded unary float intrinsic."""
    suffix = f"v{vector.type.count}f32"
    function = declare(builder, f"{name}.{suffix}", vector.type, [vector.type])
    return builder.call(function, [vector])


def _quantizer(source):
    @intrinsic
    def quantize_values(typingctx, x, out):
        """Quantises the 32 activations at `x` (dtype `source`) as the
        products do and stores ``d * q`` as float32 at `out`: ``d = absmax
        / 127``, ``q = round(x / d)`` with float32 division and halves away
        from zero, 0 where ``d`` is 0 (as `_group_quantizer`)."""
        if not integers(x, out):
            return None

        def codegen(context, builder, signature, args):
            count = 32
            float_vector = vector_type(F32, count)
            values = _load_floats(builder, args[0], source)
            magnitudes = _vector_intrinsic(builder, "llvm.fabs", values)
            reduce = declare(
                builder, "llvm.vector.reduce.fmax.v32f32", F32, [float_vector]
            )
            largest = builder.call(reduce, [magnitudes])
            d = builder.fdiv(largest, ir.Constant(F32, 127.0))
            ratio = builder.fdiv(values, splat(builder, d, count))
            codes = _vector_intrinsic(builder, "llvm.round", ratio)
            positive = builder.fcmp_ordered(">", d, ir.Constant(F32, 0.0))
            scaled = builder.fmul(splat(builder, d, count), codes)
            result = builder.select(
                positive, scaled, ir.Constant(float_vector, [0.0] * count)
            )
            _store_floats(builder, result, args[1])
            return context.get_dummy_value()

        return types.void(x, out), codegen

    return quantize_values


quantize_values_float32 = _named_helper(
    "quantize_values_float32", _quantizer("float32")
)
quantize_values_float16 = _named_helper(
    "quantize_values_float16", _quantizer("float16")
)
quantize_values_bfloat16 = _named_helper(
    "quantize_values_bfloat16", _quantizer("bfloat16")
)


QUANTIZE_VALUES = {
    "float32": quantize_values_float32,
    "float16": quantize_values_float16,
    "bfloat16": quantize_values_bfloat16,
}


@cache
def activation_values_kernel(dtype: str):
    """``run(x, x_stride, tokens, cols, values)``: quantises each row of `x`
    as the products do (`quantize_activations`) and writes the quantised
    activations ``d * q`` as a contiguous float32 ``(tokens, cols)`` matrix
    at `values` (addresses; `x_stride` in elements)."""
    quantize = QUANTIZE_VALUES[dtype]
    itemsize = 4 if dtype == "float32" else 2

    def run(x_address, x_stride, tokens, cols, values_address):
        for token in range(tokens):
            source = x_address + itemsize * token * x_stride
            target = values_address + 4 * token * cols
            for first in range(0, cols, ACTIVATION_BLOCK):
                quantize(source + itemsize * first, target + 4 * first)
        return 0

    return kernel(run)


@cache
def round_rows_kernel(dtype: str):
    """``run(source, source_stride, target, target_stride, rows, cols)``:
    rounds a float32 matrix into a 16-bit one (addresses, strides in
    elements)."""
    storage = STORAGE[dtype]
    store = storer(dtype)

    def run(source_address, source_stride, target_address, target_stride, rows, cols):
        source = element_array(
            source_address, (rows - 1) * source_stride + cols, np.float32
        )
        target = element_array(
            target_address, (rows - 1) * target_stride + cols, storage
        )
        for row in range(rows):
            for col in range(cols):
                store(
                    target, row * target_stride + col, source[row * source_stride + col]
                )
        return 0

    return kernel(run)


# The tiled product: bytes of float32 weight dequantised per panel, and the
# smallest number of rows a panel gets. Each BLAS call packs all of the
# activations again, so panels are as large as the L2 cache allows: on a
# 2 MiB L2 (Sapphire Rapids) 2 MiB panels beat 256 KiB to 1 MiB ones by 5 to
# 20% at 512 tokens and tie at 64.
PANEL_BYTES = 1 << 21
PANEL_MIN_ROWS = 32


class TiledProductPlan:
    """The product for many tokens as float32 BLAS over panels of the
    weight: the activations are quantised once (as `ProductPlan` does) and
    their quantised values ``d * q`` written out as float32; then, panel by
    panel, a few hundred weight rows are dequantised (`dequantize_kernel`,
    in parallel over rows) into a scratch buffer that stays in the cache
    and BLAS (`blas.matmul_into`) multiplies every token by it, writing the panel's
    output columns. No full float32 copy of the weight is ever made. The
    result is the product of the quantised activations with the
    dequantised weight up to float32 rounding, as the integer kernels'."""

    panel_multiple = 1

    def __init__(self, quant_type: int, weight, x, out, rows: int) -> None:
        tokens, cols = x.shape
        self.empty = tokens == 0 or rows == 0
        self.tokens, self.rows, self.cols = tokens, rows, cols
        panel_rows = max(PANEL_MIN_ROWS, PANEL_BYTES // (4 * cols))
        # A whole number of `panel_multiple` rows (the interleaved plan's
        # tiles), at least one multiple.
        multiple = self.panel_multiple
        self.panel_rows = max(multiple, min(rows, panel_rows) // multiple * multiple)
        self.values = np.zeros((max(1, tokens), cols), np.float32)
        self.panel = np.zeros((self.panel_rows, cols), np.float32)
        self.quantize = activation_values_kernel(x.dtype)
        # Dequantised serially: BLAS runs on its own thread pool, and
        # alternating it with Numba's on every panel costs more (each pool
        # spins while the other works) than the dequantisation, a few
        # percent of the product from 64 tokens on.
        self.dequantize = dequantize_kernel(quant_type, "float32", False)
        self.weight_stride = weight.strides[0]
        self.x_stride = x.strides[0]
        self.out_stride = out.strides[0]
        # float32 results go straight into `out`; 16-bit ones into a
        # float32 panel, then rounded into `out`.
        self.direct = out.dtype == "float32"
        self.out_view = HostView((tokens, rows), (self.out_stride, 1), "float32")
        if not self.direct:
            self.result = np.zeros((max(1, tokens), self.panel_rows), np.float32)
            self.round = round_rows_kernel(out.dtype)
        self.quantize_tail = (tokens, cols, self.values.ctypes.data)

    def panel_source(self, weight_address: int, first: int, count: int):
        """The address and row stride (bytes) of weight rows `first` to
        ``first + count`` in the file's layout."""
        del count  # Read in place.
        return weight_address + first * self.weight_stride, self.weight_stride

    def bind(self, weight, x, out):
        """None: the tiled path stages panels per call (`launch`)."""
        del weight, x, out

    def launch(self, weight, x, out) -> None:
        if self.empty:
            return
        self.quantize(x.data_ptr(), self.x_stride, *self.quantize_tail)
        values, panel = self.values, self.panel
        panel_address = panel.ctypes.data
        rows, cols, step = self.rows, self.cols, self.panel_rows
        weight_address = weight.data_ptr()
        dequantize = self.dequantize
        out_address = out.data_ptr()
        if self.direct:
            target = self.out_view.raw(out_address)
        for first in range(0, rows, step):
            count = min(step, rows - first)
            source, source_stride = self.panel_source(weight_address, first, count)
            dequantize(
                source,
                source_stride,
                panel_address,
                cols,
                count,
                cols,
                1,
                0,
            )
            block = panel[:count].T
            if self.direct:
                matmul_into(values, block, target[:, first : first + count])
            else:
                matmul_into(values, block, self.result[:, :count])
                self.round(
                    self.result.ctypes.data,
                    step,
                    out_address + 2 * first,
                    self.out_stride,
                    self.tokens,
                    count,
                )


# Tokens from which the products take `TiledProductPlan` rather than the
# integer kernels. Measured on one thread (Sapphire Rapids, SmolLM2 shapes,
# the tiled path then on NumPy's OpenBLAS): at 8 tokens the integer kernels
# take 0.55 to 0.7 of the tiled path's time, at 16 tokens 0.95 to 1.1, at
# 32 tokens 1.7 to 2, at 64 tokens 2.5 to 2.9. Compiled for AVX2 on an AMD
# EPYC (2 threads, `NUMBA_CPU_NAME=haswell`) the tiled path is faster from
# 16 tokens too.
TILED_MIN_TOKENS = 16
# The same with byte dot products (VNNI). Measured at 2 threads on an AMD
# EPYC with AVX-512 (Q4_1 and Q4_K shapes), in either order: the integer
# kernels take 0.5 of the tiled path's time at 16 tokens, 0.83 to 1.05 at
# 32, 1.03 to 1.2 at 64.
VNNI_TILED_MIN_TOKENS = 32


def tiled_min_tokens() -> int:
    """Tokens from which a product in the file's layout takes the tiled
    BLAS path: `VNNI_TILED_MIN_TOKENS` with VNNI, else `TILED_MIN_TOKENS`."""
    return VNNI_TILED_MIN_TOKENS if vnni_instructions() else TILED_MIN_TOKENS


def product_plan(quant_type: int, weight, x, out, rows: int):
    """The plan of a product: `TiledProductPlan` from `tiled_min_tokens`
    tokens, else `ProductPlan` (both compute the same product)."""
    tiled = x.shape[0] >= tiled_min_tokens()
    kind = TiledProductPlan if tiled else ProductPlan
    return kind(quant_type, weight, x, out, rows)


def precompile_product(operator: str, types=None, many=None) -> int:
    """Runs `infini.ops.<operator>` on small and large (parallel) weights of
    each of `types` (default: every supported type) for each activation
    dtype, with one token and a few (the integer kernels: where AMX tiles
    apply, a few tokens take their own, `ggml_amx`) and `many` (default
    `tiled_min_tokens()`: the tiled path where the operator takes it from
    there). The weights are zeros, which every layout reads alike (row
    counts are whole tiles of eight)."""
    import torch

    import infini.ops
    from infini.ops.base._ggml import FLOAT_DTYPES, SUPPORTED_TYPES

    function = getattr(infini.ops, operator)
    many = tiled_min_tokens() if many is None else many
    calls = 0
    for quant_type in types or SUPPORTED_TYPES:
        entry = GGML_TYPES[quant_type]
        for rows, cols, tokens in (
            (8, 256, 1),
            (1024, 512, 1),
            (8, 256, 2),
            (1024, 512, 2),
            (8, 256, many),
        ):
            weight = torch.zeros(
                rows,
                cols // entry.block_elements * entry.block_bytes,
                dtype=torch.uint8,
            )
            for name in FLOAT_DTYPES:
                x = torch.zeros(tokens, cols, dtype=getattr(torch, name))
                out = torch.empty(tokens, rows, dtype=x.dtype)
                function(weight, x, quant_type, rows, out, implementation_index=0)
                calls += 1
    return calls
