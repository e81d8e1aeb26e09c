"""Interleaved GGML products of a few tokens on AMX tiles
(`ggml_mul_mat_interleaved_a8` where the CPU has AMX-INT8).

With several tokens (`AMX_MIN_TOKENS` to 15) the vector kernel of
`ggml_interleaved` is bound by its byte multiply-adds: one `vpdpbusd`
per token for every four codes of eight rows. An AMX tile multiply does
a whole block of 32 values for 16 rows and every token in one
instruction. Per block of two tiles side by side (16 rows), the kernel
unpacks the codes once into a 512-byte scratch in the layout the
instruction reads (row ``k`` holds values ``4k`` to ``4k + 3`` of each
weight row: the interleaved layout's four-byte groups already are),
loads the tokens' activation codes of the block as the other operand
(one row per token, the activation scratch's own stride), and stores the
int32 sums. The block's scales then apply as in the vector kernel, 16
rows per float vector: the same integer sums and the same multiply-adds
in the same order, so the results are bit-identical to it.

The tile unit runs far below its width here (8 tokens by 32 values
fill a quarter of a tile multiply's 16 rows by 64 bytes), and each block's
sums make a round trip through memory, so the blocks go through a
pipeline: the codes of block ``j`` are unpacked while block ``j - 2`` is
multiplied and block ``j - 4`` scaled, each stage reading what the one
before wrote a whole step earlier.

Linux hands out the tile registers' state only on request
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``), once per
process; `amx_instructions` asks. Each worker configures its tiles
(`tile_configure`) before its chunk and releases them after.
``INFINI_OPS_CPU_AMX=0`` turns the path off (for comparisons).
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import cache

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from infini.ops.base._ggml import (
    ACTIVATION_BLOCK,
    GGML_TYPES,
    INTERLEAVED_ROWS,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
)

from .dtype_io import loader, storer
from .ggml import quantize_batch
from .ggml_interleaved import (
    TILE_DOT,
    TILE_LAYOUTS,
    InterleavedProductPlan,
    clear_sums,
    load_halves,
    store_sums,
    tile_codes,
)
from .jit import compiled_with, kernel
from .memory import STORAGE, element_array
from .vector_ir import F32, I8, I32, I64, add_offset, carried_loop, declare, i64, splat

# The formats of one scale (and minimum) per block of 32 values, and the
# fewest tokens from which the tiles beat the vector kernel (measured on
# SmolLM2's shapes at 1 and 2 threads: unpacking and multiplying a block
# cost the tiles as much for 2 tokens as for 15, while the vector kernel's
# cost grows with the tokens). Q8_0's were measured while the vector
# kernel still moved its codes' signs onto the activations per token; it
# now biases the codes once per block (`ggml_interleaved._TileTerms`), so
# Q8_0's crossover is to be measured again on an AMX host.
AMX_MIN_TOKENS = {Q4_0: 7, Q4_1: 7, Q5_0: 7, Q5_1: 7, Q8_0: 4}
AMX_TYPES = tuple(AMX_MIN_TOKENS)
# Below this many rows the tile configuration and the pipeline's start and
# end outweigh the gain.
AMX_MIN_ROWS = 128

# Rows of a tile pair, and the most tokens a tile holds.
PAIR_ROWS = 2 * INTERLEAVED_ROWS
MAX_TOKENS = 16

# Per chunk, twice (a block's buffers are read while the next block's are
# written): the unpacked codes (8 rows of 64 bytes), then the int32 sums (a
# row of 64 bytes per token).
CODES_BYTES = 8 * 64
SUMS_BYTES = MAX_TOKENS * 64
SCRATCH_BYTES = 2 * (CODES_BYTES + SUMS_BYTES)

# The tile registers: the sums, the activations, the codes; blocks of odd
# index take the next three.
_SUMS, _ACTIVATIONS, _CODES = 0, 1, 2

_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
_SYS_ARCH_PRCTL = 158


@cache
def amx_instructions() -> bool:
    """Whether the kernels are compiled for a CPU with AMX-INT8 and Linux
    lets this process use the tile registers (asked once)."""
    if sys.platform != "linux" or not compiled_with("amx-tile", "amx-int8"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    granted = libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    return granted == 0


def amx_enabled() -> bool:
    """`amx_instructions`, unless ``INFINI_OPS_CPU_AMX=0``."""
    return os.environ.get("INFINI_OPS_CPU_AMX", "1") != "0" and amx_instructions()


def tile_config(tokens: int) -> np.ndarray:
    """The 64-byte tile configuration (palette 1) of a product of `tokens`
    tokens: the sums (`tokens` rows of 16 int32), the activations
    (`tokens` rows of 32 bytes) and the codes (8 rows of 64 bytes)."""
    config = np.zeros(64, np.uint8)
    config[0] = 1
    widths = config[16:32].view(np.uint16)
    heights = config[48:56]
    for register, rows, width in (
        (_SUMS, tokens, 64),
        (_ACTIVATIONS, tokens, ACTIVATION_BLOCK),
        (_CODES, 8, 64),
    ):
        for parity in (0, 1):
            widths[3 * parity + register] = width
            heights[3 * parity + register] = rows
    return config


_POINTER = I8.as_pointer()
_VOID = ir.VoidType()


def _tile_call(builder, name, arg_types, args):
    function = declare(builder, f"llvm.x86.{name}", _VOID, arg_types)
    builder.call(function, args)


@intrinsic
def tile_configure(typingctx, config):
    """Loads the tile configuration at address `config` (`ldtilecfg`)."""
    if not isinstance(config, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        address = context.cast(builder, args[0], signature.args[0], types.int64)
        pointer = builder.inttoptr(address, _POINTER)
        _tile_call(builder, "ldtilecfg", [_POINTER], [pointer])
        return i64(0)

    return types.int64(config), codegen


@intrinsic
def tile_release(typingctx, unused):
    """Releases the tiles (`tilerelease`); `unused` is any integer."""
    if not isinstance(unused, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        _tile_call(builder, "tilerelease", [], [])
        return i64(0)

    return types.int64(unused), codegen


_FLOATS = ir.VectorType(F32, PAIR_ROWS)
_LANES = ir.VectorType(I32, PAIR_ROWS)


def _pair_halves(builder, first, second):
    """The eight halves at `first` then the eight at `second`, as float32."""
    return builder.shuffle_vector(
        load_halves(builder, first),
        load_halves(builder, second),
        ir.Constant(ir.VectorType(I32, PAIR_ROWS), list(range(PAIR_ROWS))),
    )


def _group_scalar(builder, base, group, scalar_type, size):
    address = builder.add(base, builder.mul(group, i64(size)))
    return builder.load(builder.inttoptr(address, scalar_type.as_pointer()), align=size)


def _pair_dot(quant_type):
    layout = TILE_LAYOUTS[quant_type]
    multiply = "tdpbssd" if layout.signed else "tdpbsud"
    tile_block = INTERLEAVED_ROWS * layout.block_bytes

    @intrinsic
    def pair_dot(
        typingctx,
        tile,
        tile_bytes,
        blocks,
        tokens,
        x,
        cols,
        scales,
        sums,
        block_sums,
        acc,
        scratch,
    ):
        """Adds to `acc` (float32, 16 per token) the dot products of the 16
        rows of the two tiles at `tile` and ``tile + tile_bytes`` (`blocks`
        tile blocks each) with each token's activation codes and groups (as
        `ggml_interleaved`'s `tile_dot`), through the tiles `tile_configure`
        set up and the 64-byte aligned `scratch` (`SCRATCH_BYTES`)."""
        arguments = (
            tile, tile_bytes, blocks, tokens, x, cols, scales, sums, block_sums,
            acc, scratch,
        )  # fmt: skip
        if not all(isinstance(value, types.Integer) for value in arguments):
            return None

        def codegen(context, builder, signature, args):
            (
                tile, tile_bytes, blocks, tokens, x, cols, scales, sums,
                block_sums, acc, scratch,
            ) = [
                context.cast(builder, value, value_type, types.int64)
                for value, value_type in zip(args, signature.args, strict=True)
            ]  # fmt: skip
            groups = builder.sdiv(cols, i64(ACTIVATION_BLOCK))
            fmuladd = declare(builder, "llvm.fmuladd.v16f32", _FLOATS, [_FLOATS] * 3)

            def starts(index):
                """The two tiles' blocks `index`."""
                offset = builder.mul(index, i64(tile_block))
                return (
                    builder.add(tile, offset),
                    builder.add(builder.add(tile, tile_bytes), offset),
                )

            def unpack(index, parity):
                """Block `index`'s codes into codes buffer `parity`."""
                codes_at = add_offset(builder, scratch, CODES_BYTES * parity)
                codes = tile_codes(builder, layout, *starts(index))
                for step, parts in enumerate(codes):
                    for part, values in enumerate(parts):
                        # Codes of values 4k..4k+3 go to row k.
                        at = add_offset(builder, codes_at, 64 * (step + 4 * part))
                        pointer = builder.inttoptr(at, values.type.as_pointer())
                        builder.store(values, pointer, align=64)

            def multiply_block(index, parity):
                """Block `index`'s integer sums into sums buffer `parity`,
                on tile registers `parity`."""
                sums_reg, activations_reg, codes_reg = (
                    I8(3 * parity + register)
                    for register in (_SUMS, _ACTIVATIONS, _CODES)
                )
                codes_at = add_offset(builder, scratch, CODES_BYTES * parity)
                x_block = builder.add(x, builder.mul(index, i64(ACTIVATION_BLOCK)))
                load = ("tileloadd64", [I8, _POINTER, I64])
                _tile_call(
                    builder, *load,
                    [codes_reg, builder.inttoptr(codes_at, _POINTER), i64(64)],
                )  # fmt: skip
                _tile_call(
                    builder, *load,
                    [activations_reg, builder.inttoptr(x_block, _POINTER), cols],
                )  # fmt: skip
                _tile_call(builder, "tilezero", [I8], [sums_reg])
                _tile_call(
                    builder,
                    multiply,
                    [I8, I8, I8],
                    [sums_reg, activations_reg, codes_reg],
                )
                _tile_call(
                    builder,
                    "tilestored64",
                    [I8, _POINTER, I64],
                    [sums_reg, builder.inttoptr(sums_at(parity), _POINTER), i64(64)],
                )

            def sums_at(parity):
                return add_offset(
                    builder, scratch, 2 * CODES_BYTES + SUMS_BYTES * parity
                )

            def scale_block(index, parity):
                """Block `index`'s terms (sums buffer `parity`) added to
                every token's running sums."""
                first, second = starts(index)
                scale = _pair_halves(builder, first, second)
                minimum = None
                if layout.minimum is not None:
                    minimum = _pair_halves(
                        builder,
                        add_offset(builder, first, layout.tile_minimum),
                        add_offset(builder, second, layout.tile_minimum),
                    )
                block_sums_at = sums_at(parity)

                def token_terms(token, _):
                    group = builder.add(builder.mul(token, groups), index)
                    at = builder.add(block_sums_at, builder.mul(token, i64(64)))
                    lanes = builder.load(
                        builder.inttoptr(at, _LANES.as_pointer()), align=64
                    )
                    if layout.offset:
                        # sum((q - offset) * x) = sum(q * x) - offset * sum(x).
                        pair = _group_scalar(
                            builder, sums, group, ir.VectorType(I32, 2), 8
                        )
                        code_sum = builder.add(
                            builder.extract_element(pair, I32(0)),
                            builder.extract_element(pair, I32(1)),
                        )
                        offset = builder.mul(code_sum, I32(layout.offset))
                        lanes = builder.sub(lanes, splat(builder, offset, PAIR_ROWS))
                    x_scale = _group_scalar(builder, scales, group, F32, 4)
                    pointer = builder.inttoptr(
                        builder.add(acc, builder.mul(token, i64(4 * PAIR_ROWS))),
                        _FLOATS.as_pointer(),
                    )
                    running = builder.load(pointer, align=4)
                    running = builder.call(
                        fmuladd,
                        [
                            builder.sitofp(lanes, _FLOATS),
                            builder.fmul(scale, splat(builder, x_scale, PAIR_ROWS)),
                            running,
                        ],
                    )
                    if minimum is not None:
                        block_sum = _group_scalar(builder, block_sums, group, F32, 4)
                        running = builder.call(
                            fmuladd,
                            [minimum, splat(builder, block_sum, PAIR_ROWS), running],
                        )
                    builder.store(running, pointer, align=4)
                    return []

                carried_loop(builder, tokens, "amx_tokens", [], token_terms)

            def stages(j, parity):
                """Step `j` of the pipeline: scale block j - 4, multiply
                block j - 2, unpack block j (those that exist). Each stage
                reads what the one before it wrote a whole step earlier (a
                tile load of just stored codes, or loads of just stored
                sums, would wait for those stores to reach the cache), and
                the buffers of parity ``j % 2`` are read before they are
                written again."""
                for lag, stage in ((4, scale_block), (2, multiply_block)):
                    index = builder.sub(j, i64(lag))
                    within = builder.and_(
                        builder.icmp_signed(">=", index, i64(0)),
                        builder.icmp_signed("<", index, blocks),
                    )
                    with builder.if_then(within):
                        stage(index, parity)
                with builder.if_then(builder.icmp_signed("<", j, blocks)):
                    unpack(j, parity)

            def two_steps(index, _):
                j = builder.mul(index, i64(2))
                stages(j, 0)
                stages(builder.add(j, i64(1)), 1)
                return []

            # Steps 0 to blocks + 3, two per iteration.
            iterations = builder.sdiv(builder.add(blocks, i64(5)), i64(2))
            carried_loop(builder, iterations, "amx_steps", [], two_steps)
            return i64(0)

        return types.int64(*arguments), codegen

    return pair_dot


PAIR_DOT = {quant_type: _pair_dot(quant_type) for quant_type in AMX_TYPES}


@cache
def amx_product_kernel(quant_type: int, dtype: str, parallel: bool):
    """``run(weight, x, x_stride, out, out_stride, tokens, rows, cols, codes,
    scales, block_sums, sums, acc, config, scratch, chunks)``: as
    `ggml_interleaved.interleaved_product_kernel`'s, over pairs of tiles
    (`acc` of ``chunks * tokens * 16`` floats), a last odd tile on the
    vector kernel; `config` is `tile_config`'s bytes, `scratch` ``chunks *
    SCRATCH_BYTES`` bytes, 64-byte aligned."""
    pair_dot = PAIR_DOT[quant_type]
    tile_dot = TILE_DOT[quant_type]
    storage = STORAGE[dtype]
    load = loader(dtype)
    store = storer(dtype)
    tile_rows = INTERLEAVED_ROWS
    pair_rows = PAIR_ROWS
    scratch_bytes = SCRATCH_BYTES
    block_elements = GGML_TYPES[quant_type].block_elements
    block_bytes = GGML_TYPES[quant_type].block_bytes

    def run(
        weight,
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
        acc_address,
        config_address,
        scratch_address,
        chunks,
    ):
        x = element_array(x_address, (tokens - 1) * x_stride + cols, storage)
        out = element_array(out_address, (tokens - 1) * out_stride + rows, storage)
        acc = element_array(acc_address, chunks * tokens * pair_rows, np.float32)
        quantize_batch(
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
        blocks = cols // block_elements
        tile_bytes = tile_rows * blocks * block_bytes
        tiles = (rows + tile_rows - 1) // tile_rows
        pairs = tiles // 2
        for chunk in prange(chunks):
            first_sum = chunk * tokens * pair_rows
            sums_at = acc_address + 4 * first_sum
            tile_configure(config_address)
            for pair in range(chunk * pairs // chunks, (chunk + 1) * pairs // chunks):
                clear_sums(acc, first_sum, tokens * pair_rows)
                pair_dot(
                    weight + 2 * pair * tile_bytes,
                    tile_bytes,
                    blocks,
                    tokens,
                    codes_address,
                    cols,
                    scales_address,
                    sums_address,
                    block_sums_address,
                    sums_at,
                    scratch_address + chunk * scratch_bytes,
                )
                store_sums(
                    store, out, out_stride, pair * pair_rows, rows, tokens, acc,
                    first_sum, pair_rows,
                )  # fmt: skip
            tile_release(chunk)
        if tiles % 2:
            # The last tile alone, on the vector kernel.
            clear_sums(acc, 0, tokens * tile_rows)
            tile_dot(
                weight + (tiles - 1) * tile_bytes,
                blocks,
                tokens,
                codes_address,
                cols,
                scales_address,
                sums_address,
                block_sums_address,
                acc_address,
            )
            store_sums(
                store, out, out_stride, (tiles - 1) * tile_rows, rows, tokens, acc,
                0, tile_rows,
            )  # fmt: skip
        return 0

    return kernel(run, parallel=parallel)


class AmxProductPlan(InterleavedProductPlan):
    """`InterleavedProductPlan` on AMX tiles: pairs of tiles, with the tile
    configuration and a scratch per chunk."""

    kernel = staticmethod(amx_product_kernel)
    tile_rows = PAIR_ROWS

    def kernel_scratch(self, tokens: int, chunks: int) -> tuple:
        self.acc = np.zeros(max(1, chunks * tokens * PAIR_ROWS), np.float32)
        self.config = tile_config(tokens)
        self.scratch = np.zeros(chunks * SCRATCH_BYTES + 64, np.uint8)
        aligned = -self.scratch.ctypes.data % 64
        return (
            self.acc.ctypes.data,
            self.config.ctypes.data,
            self.scratch.ctypes.data + aligned,
        )


def amx_applies(quant_type: int, tokens: int, rows: int) -> bool:
    """Whether a product of `tokens` tokens and `rows` rows of `quant_type`
    runs on AMX tiles (`AmxProductPlan`)."""
    return (
        quant_type in AMX_MIN_TOKENS
        and AMX_MIN_TOKENS[quant_type] <= tokens <= MAX_TOKENS
        and rows >= AMX_MIN_ROWS
        and amx_enabled()
    )
