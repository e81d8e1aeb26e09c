"""Scalar conversions used inside kernels.

float16 uses LLVM's `half` conversions (F16C instructions on x86-64, `fcvt`
on AArch64); bfloat16 is the upper half of a float32, rounded to nearest even
on the way back, with NaNs kept quiet.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import helper


@intrinsic
def float16_bits_to_float32(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def float32_to_float16_bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(types.float32), codegen


@intrinsic
def float32_bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def bits_float32(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@intrinsic
def fma_float32(typingctx, a, b, c):
    """``a * b + c`` rounded once (LLVM's `llvm.fma`: one instruction on
    x86-64 with FMA and on AArch64; a correctly rounded libm call elsewhere).
    Kernels use it where the single rounding is what makes a result exact,
    such as the remainder ``1 - t * d`` of a division."""
    float32 = types.float32

    def codegen(context, builder, signature, args):
        single = ir.FloatType()
        function = builder.module.declare_intrinsic(
            "llvm.fma", [single], ir.FunctionType(single, [single] * 3)
        )
        return builder.call(function, args)

    return float32(float32, float32, float32), codegen


@helper
def bfloat16_bits_to_float32(bits):
    return bits_float32(np.uint32(bits) << np.uint32(16))


@helper
def float32_to_bfloat16_bits(value):
    bits = float32_bits(value)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    # NaNs keep their upper half, made quiet. Picked on the 32-bit words
    # with a mask, then shifted once: vectorised loops then narrow one
    # vector to 16 bits instead of two and a 16-bit blend.
    nan = np.uint32(0) - np.uint32(value != value)
    chosen = (rounded & ~nan) | ((bits | np.uint32(0x400000)) & nan)
    return np.uint16(chosen >> np.uint32(16))


@helper
def float64_to_float32_round_to_odd(value):
    """Narrows to float32 keeping the sticky bit (round to odd): rounding that
    result again to a format of at most 22 significand bits (float16,
    bfloat16) equals one correct rounding from float64."""
    narrowed = np.float32(value)
    if np.float64(narrowed) != value and narrowed == narrowed:
        bits = float32_bits(narrowed)
        if (bits & np.uint32(1)) == 0:
            if abs(np.float64(narrowed)) < abs(value):
                bits = bits + np.uint32(1)
            else:
                bits = bits - np.uint32(1)
        narrowed = bits_float32(bits)
    return narrowed


@helper
def float64_to_bfloat16_bits(value):
    return float32_to_bfloat16_bits(float64_to_float32_round_to_odd(value))


@helper
def float64_to_float16_bits(value):
    # LLVM's direct double -> half conversion needs a runtime routine
    # (`__truncdfhf2`) that Numba does not link, so go through float32.
    return float32_to_float16_bits(float64_to_float32_round_to_odd(value))
