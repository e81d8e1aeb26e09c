"""GGML block formats (GGUF weights) for the CUDA-like Triton kernels:
dequantisation and the products with 8-bit quantised activations
(`ggml_dequantize`, `ggml_mul_mat_vec_a8`, `ggml_mul_mat_a8`). The block
layouts are described in `infini.ops.base._ggml`.

Every supported type writes a value as ``scale * code + offset``: an integer
code (at most 8 bits, signed after the type's shift) with a float32 scale and
offset shared by a *group* of 16 or 32 values (`GROUPS` below): the block
for Q4_0 to Q8_0, a sub-block of 32 (Q4_K, Q5_K) or 16 (Q2_K, Q3_K, Q6_K)
values for the K-quants. One `@triton.jit` helper per type (`q4_0_group`,
...; picked by the constexpr ``TYPE`` in `group_codes`) decodes a ``(rows,
groups)`` tile of groups: it loads each group's code bytes as one contiguous
run (16 to 32 bytes, which become vector loads as wide as the block layout's
alignment allows when the row stride is a multiple of 16: 128 bits for
Q4_K/Q5_K codes, 64 for Q5_1, 32 for Q4_1 and Q2_K, 16 for the 18-, 22-,
34-, 110- and 210-byte blocks; `weight_row_stride` tells the kernels smaller
powers of two), unpacks the codes with shifts and masks, reads the float16
factors as little-endian runs of 2 or 4 bytes (``high << 8 | low`` bitcast to
float16; one load where aligned, and correct where a strided weight leaves
them unaligned) and decodes the K-quants' 6-bit and 4-bit scales. Groups
cover consecutive values, so a tile of codes reshapes to ``(rows, values)``
in column order.

The three operators share the helpers:

- `ggml_dequantize` (and the decode product) turn a tile into float32 values
  with the operations and operand order of llama.cpp's reference
  (`gguf.quants`): ``scale * code``, then the offset added. With ``EXACT``
  the products pass through a multiply by the runtime argument `one` (1.0)
  first: the compiler may fuse a product into the add that follows (a fused
  multiply-add rounds once, not twice) but cannot see through an unknown
  factor, and ``fma(p, 1, c)`` is ``p + c``, so the results equal
  `gguf.quants.dequantize` bit for bit on GPUs as under the interpreter.
- The decode product (`product_vector_kernel`, up to `VECTOR_MAX_TOKENS`
  tokens): one program per tile of weight rows streams their blocks once,
  a tile of groups per step dequantised in registers and multiplied with
  each token's quantised activations (quantised in registers by every
  program: they are small and stay in the cache).
- The prefill product (`product_tile_kernel`): the activations are quantised
  once by `quantize_kernel` into int8 codes and float32 scales; each program
  computes a (tokens x rows) tile, one weight group at a time: the integer
  dot products of activation codes and weight codes run on tensor cores
  (`tl.dot` of float16 operands, which hold codes exactly, accumulated
  exactly in float32: at most 32 products of 8-bit codes), then scaled by
  the activation block's scale and the weight group's scale (plus the
  offset times the activation codes' sum), as llama.cpp's MMQ kernels and
  the CPU integer kernels do.

Activations are quantised per block of 32 values as the CPU kernels do
(`quantize_blocks`): ``d = absmax / 127`` and codes ``round(x / d)``
(correctly rounded float32 divisions, halves away from zero; codes 0 where
``d`` is 0, and a NaN scale for a block holding a NaN or an infinity), so the
products are the product of the quantised activations with the dequantised
weight up to float32 rounding.
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl

from infini.ops.base._ggml import (
    ACTIVATION_BLOCK,
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
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_or_zero, store_as
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    Pointer,
    next_power_of_two,
    staging_like,
)


class GroupGeometry(NamedTuple):
    """How a type's blocks split into groups sharing a scale and offset."""

    values: int  # values per group
    per_block: int  # groups per block
    block_bytes: int
    offset: bool  # whether the values have an offset (a minimum)


GROUPS = {
    Q4_0: GroupGeometry(32, 1, 18, False),
    Q4_1: GroupGeometry(32, 1, 20, True),
    Q5_0: GroupGeometry(32, 1, 22, False),
    Q5_1: GroupGeometry(32, 1, 24, True),
    Q8_0: GroupGeometry(32, 1, 34, False),
    Q2_K: GroupGeometry(16, 16, 84, True),
    Q3_K: GroupGeometry(16, 16, 110, False),
    Q4_K: GroupGeometry(32, 8, 144, True),
    Q5_K: GroupGeometry(32, 8, 176, True),
    Q6_K: GroupGeometry(16, 16, 210, False),
}


def group_constexprs(quant_type: int) -> dict:
    """The constexprs of `quant_type`'s geometry the kernels take."""
    group = GROUPS[quant_type]
    return {
        "TYPE": quant_type,
        "GROUP": group.values,
        "PER_BLOCK": group.per_block,
        "BLOCK_BYTES": group.block_bytes,
        "OFFSET": group.offset,
    }


def weight_row_stride(weight) -> tuple[int, dict]:
    """The weight's row stride as ``(stride / STRIDE_ALIGN, {"STRIDE_ALIGN":
    ...})``: the largest power of two up to 16 dividing the stride becomes a
    constexpr factor. Triton only learns that a runtime integer is a multiple
    of 16; rows of 20-byte (Q4_1) or 110-byte (Q3_K) blocks are often a
    multiple of 4 or 8 bytes only, which still allows 32- and 16-bit loads
    of their codes."""
    stride = weight.strides[0]
    align = 16
    while stride % align:
        align //= 2
    return stride // align, {"STRIDE_ALIGN": align}


# -- loading bytes and factors ------------------------------------------------------
#
# Under the interpreter every call of a `@triton.jit` function costs several
# milliseconds, so the helpers below call few others: byte loads are written
# out where they are needed.


@triton.jit
def _little_endian(weight, offset, mask, LENGTH: tl.constexpr):
    """The little-endian integer of `LENGTH` (2 or 4) bytes at `offset`
    ``(rows, groups)``, as int32. The bytes are loaded as one run, a single
    load where their alignment allows; their bits are disjoint, so their
    shifted sum is the integer."""
    position = tl.arange(0, LENGTH)[None, None, :]
    packed = tl.load(
        weight + offset[:, :, None] + position, mask=mask[:, :, None], other=0
    )
    return tl.sum(packed.to(tl.int32) << (8 * position), axis=2)


@triton.jit
def _to_float(bits):
    """The float16 with the low 16 bits of `bits`, as float32."""
    return (bits & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _half(weight, offset, mask):
    """The little-endian float16 at byte `offset` (any alignment), as
    float32 (0 where masked)."""
    return _to_float(_little_endian(weight, offset, mask, 2))


@triton.jit
def _halves(weight, offset, mask):
    """The two consecutive float16 at byte `offset` (a scale and a minimum),
    as float32."""
    word = _little_endian(weight, offset, mask, 4)
    return _to_float(word), _to_float(word >> 16)


@triton.jit
def _run(weight, offset, mask, LENGTH: tl.constexpr):
    """`LENGTH` consecutive bytes from `offset` ``(rows, groups)``: ``(rows,
    groups, LENGTH)`` int32."""
    at = offset[:, :, None] + tl.arange(0, LENGTH)[None, None, :]
    return tl.load(weight + at, mask=mask[:, :, None], other=0).to(tl.int32)


@triton.jit
def _nibble_pairs(weight, offset, mask, high_bits, HIGH: tl.constexpr):
    """The 32 codes of 16 bytes of nibble pairs (the low nibbles are values
    0-15, the high ones 16-31): ``(rows, groups, 32)`` int32. With `HIGH`,
    bit ``j`` of the little-endian 32-bit word at `high_bits` (any
    alignment) is bit 4 of code ``j`` (Q5_0, Q5_1)."""
    rows: tl.constexpr = offset.shape[0]
    groups: tl.constexpr = offset.shape[1]
    at = offset[:, :, None] + tl.arange(0, 16)[None, None, :]
    packed = tl.load(weight + at, mask=mask[:, :, None], other=0).to(tl.int32)
    shift = (4 * tl.arange(0, 2))[None, None, :, None]
    codes = tl.reshape((packed[:, :, None, :] >> shift) & 15, (rows, groups, 32))
    if HIGH:
        position = tl.arange(0, 4)[None, None, :]
        word = tl.load(
            weight + high_bits[:, :, None] + position, mask=mask[:, :, None], other=0
        )
        # The bytes' bits are disjoint: their sum is the word.
        word = tl.sum(word.to(tl.int32) << (8 * position), axis=2)
        bits = (word[:, :, None] >> tl.arange(0, 32)[None, None, :]) & 1
        codes = codes | (bits << 4)
    return codes


# -- one helper per type: ``(rows, groups)`` block offsets `base` and group
# indices in the block `group` -> ``(codes (rows, groups, GROUP) int32, scale,
# offset)``, scale and offset ``(rows, groups)`` float32 (the offset is the
# scale again for the types without one). With `EXACT` the products feeding
# an add are multiplied by `one` (see the module doc). -----------------------------


@triton.jit
def q4_0_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d = _half(weight, base, mask)
    return _nibble_pairs(weight, base + 2, mask, base, False) - 8, d, d


@triton.jit
def q4_1_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d, m = _halves(weight, base, mask)
    return _nibble_pairs(weight, base + 4, mask, base, False), d, m


@triton.jit
def q5_0_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d = _half(weight, base, mask)
    return _nibble_pairs(weight, base + 6, mask, base + 2, True) - 16, d, d


@triton.jit
def q5_1_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d, m = _halves(weight, base, mask)
    return _nibble_pairs(weight, base + 8, mask, base + 4, True), d, m


@triton.jit
def q8_0_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d = _half(weight, base, mask)
    at = base[:, :, None] + 2 + tl.arange(0, 32)[None, None, :]
    packed = tl.load(weight + at, mask=mask[:, :, None], other=0)
    return packed.to(tl.int8, bitcast=True).to(tl.int32), d, d


# Group ``g`` of 16 values of a Q2_K, Q3_K or Q6_K block is values ``128 h +
# 32 k + 16 s`` onwards with ``h = g / 8``, ``k = (g % 8) / 2``, ``s = g % 2``.


@triton.jit
def q2_k_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    # Value ``128 h + 32 k + 16 s + i`` is bits ``2k`` of code byte ``16 + 32
    # h + 16 s + i``; scale byte `group` holds its scale (low nibble) and min.
    field = (group % 8) // 2
    packed = _run(weight, base + 16 + 32 * (group // 8) + 16 * (group % 2), mask, 16)
    codes = (packed >> (2 * field)[:, :, None]) & 3
    scales = tl.load(weight + base + group, mask=mask, other=0).to(tl.int32)
    d, dmin = _halves(weight, base + 80, mask)
    scale = d * (scales & 15).to(tl.float32)
    minimum = dmin * (scales >> 4).to(tl.float32)
    if EXACT:
        minimum = minimum * one
    return codes, scale, -minimum


@triton.jit
def q3_k_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    # As Q2_K for the low bits, from byte 32; bit ``4 h + k`` of mask byte
    # ``16 s + i`` is bit 2 of the code (set: no offset, clear: 4 below). The
    # 6-bit scale has its low nibble in byte ``g % 8`` (nibble ``g / 8``) and
    # its top bits at ``2 (g / 4)`` in byte ``8 + g % 4``, from byte 96.
    half = group // 8
    field = (group % 8) // 2
    side = group % 2
    low = _run(weight, base + 32 + 32 * half + 16 * side, mask, 16)
    low = (low >> (2 * field)[:, :, None]) & 3
    high = _run(weight, base + 16 * side, mask, 16)
    high = (high >> (4 * half + field)[:, :, None]) & 1
    scale_low = tl.load(weight + base + 96 + group % 8, mask=mask, other=0)
    scale_low = (scale_low.to(tl.int32) >> (4 * half)) & 15
    scale_high = tl.load(weight + base + 104 + group % 4, mask=mask, other=0)
    scale_high = (scale_high.to(tl.int32) >> (2 * (group // 4))) & 3
    d = _half(weight, base + 108, mask)
    scale = d * ((scale_low | (scale_high << 4)) - 32).to(tl.float32)
    return low + 4 * high - 4, scale, scale


@triton.jit
def _k_values(weight, base, group, mask, codes, one, EXACT: tl.constexpr):
    """`codes` of group `group` (of 8) of Q4_K/Q5_K blocks with their scale
    ``d * scale`` and offset ``-dmin * min``: the 6-bit scale and min codes
    of groups 0-3 are the low bits of bytes ``4 + j`` and ``8 + j``; those
    of groups 4-7 take the nibbles of byte ``8 + j`` and the top two bits of
    bytes ``j`` and ``4 + j``."""
    at = weight + base + 4
    first = tl.load(at + group, mask=mask, other=0).to(tl.int32)
    second = tl.load(at + group + 4, mask=mask, other=0).to(tl.int32)
    before = tl.where(group >= 4, group - 4, group)
    before = tl.load(at + before, mask=mask, other=0).to(tl.int32)
    low = group < 4
    scale_code = tl.where(low, first & 63, (second & 15) | ((before >> 6) << 4))
    min_code = tl.where(low, second & 63, (second >> 4) | ((first >> 6) << 4))
    d, dmin = _halves(weight, base, mask)
    scale = d * scale_code.to(tl.float32)
    minimum = dmin * min_code.to(tl.float32)
    if EXACT:
        minimum = minimum * one
    return codes, scale, -minimum


@triton.jit
def q4_k_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    # Group `j` is the low (even `j`) or high nibbles of bytes ``16 + 32 (j /
    # 2)`` onwards.
    packed = _run(weight, base + 16 + 32 * (group // 2), mask, 32)
    codes = (packed >> (4 * (group % 2))[:, :, None]) & 15
    return _k_values(weight, base, group, mask, codes, one, EXACT)


@triton.jit
def q5_k_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    # As Q4_K from byte 48, with bit `j` of high byte ``16 + l`` as bit 4 of
    # value `l` of group `j`.
    packed = _run(weight, base + 48 + 32 * (group // 2), mask, 32)
    codes = (packed >> (4 * (group % 2))[:, :, None]) & 15
    at = base[:, :, None] + 16 + tl.arange(0, 32)[None, None, :]
    high = tl.load(weight + at, mask=mask[:, :, None], other=0).to(tl.int32)
    codes = codes | (((high >> group[:, :, None]) & 1) << 4)
    return _k_values(weight, base, group, mask, codes, one, EXACT)


@triton.jit
def q6_k_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    # Value ``128 h + 32 k + 16 s + i`` is nibble ``k / 2`` of low byte ``64 h
    # + 32 (k % 2) + 16 s + i`` with bits ``2k`` of high byte ``128 + 32 h +
    # 16 s + i`` on top, minus 32; int8 scale byte ``192 + group``.
    half = group // 8
    field = (group % 8) // 2
    side = group % 2
    low = _run(weight, base + 64 * half + 32 * (field % 2) + 16 * side, mask, 16)
    low = (low >> (4 * (field // 2))[:, :, None]) & 15
    high = _run(weight, base + 128 + 32 * half + 16 * side, mask, 16)
    high = (high >> (2 * field)[:, :, None]) & 3
    scales = tl.load(weight + base + 192 + group, mask=mask, other=0)
    d = _half(weight, base + 208, mask)
    scale = d * scales.to(tl.int8, bitcast=True).to(tl.float32)
    return (low | (high << 4)) - 32, scale, scale


@triton.jit
def group_codes(
    weight, base, group, mask, one, TYPE: tl.constexpr, EXACT: tl.constexpr
):
    """``(codes, scale, offset)`` of the groups `group` ``(rows, groups)``
    of the GGML type `TYPE` blocks at byte offsets `base` ``(rows,
    groups)``. Masked groups read zero bytes, whose scales are 0."""
    if TYPE == 2:
        result = q4_0_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 3:
        result = q4_1_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 6:
        result = q5_0_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 7:
        result = q5_1_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 8:
        result = q8_0_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 10:
        result = q2_k_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 11:
        result = q3_k_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 12:
        result = q4_k_group(weight, base, group, mask, one, EXACT)
    elif TYPE == 13:
        result = q5_k_group(weight, base, group, mask, one, EXACT)
    else:
        tl.static_assert(TYPE == 14, "unsupported GGML type")
        result = q6_k_group(weight, base, group, mask, one, EXACT)
    return result


@triton.jit
def weight_values(
    weight,
    row_offset,
    row_mask,
    first,
    groups,
    one,
    STEP: tl.constexpr,
    TYPE: tl.constexpr,
    GROUP: tl.constexpr,
    PER_BLOCK: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,
    OFFSET: tl.constexpr,
    EXACT: tl.constexpr,
):
    """The float32 values of groups ``first`` to ``first + STEP - 1`` of the
    weight rows at byte offsets `row_offset` ``(rows,)``: ``(rows, STEP *
    GROUP)`` in column order, ``scale * code (+ offset)``. Groups from
    `groups` (the row's end) and masked rows are zeros."""
    rows: tl.constexpr = row_offset.shape[0]
    index = first + tl.arange(0, STEP)
    base = row_offset[:, None] + ((index // PER_BLOCK) * BLOCK_BYTES)[None, :]
    mask = row_mask[:, None] & (index < groups)[None, :]
    codes, scale, offset = group_codes(
        weight, base, (index % PER_BLOCK)[None, :], mask, one, TYPE, EXACT
    )
    values = scale[:, :, None] * codes.to(tl.float32)
    if EXACT:
        values = values * one
    if OFFSET:
        values = values + offset[:, :, None]
    return tl.reshape(values, (rows, STEP * GROUP))


# -- activations -----------------------------------------------------------------

FLOAT32_MAX = tl.constexpr(3.4028234663852886e38)
NAN = tl.constexpr(float("nan"))


@triton.jit
def quantize_blocks(x):
    """Activations ``(tokens, columns)`` (float32, columns a multiple of 32)
    quantised per block of 32 values: ``(codes, d)``, the codes ``round(x /
    d)`` as float32 ``(tokens, columns / 32, 32)`` and the scales ``d =
    absmax / 127`` ``(tokens, columns / 32)`` (see the module doc)."""
    tokens: tl.constexpr = x.shape[0]
    columns: tl.constexpr = x.shape[1]
    blocks = tl.reshape(x, (tokens, columns // 32, 32))
    magnitude = tl.abs(blocks)
    largest = tl.max(magnitude, axis=2)
    # `max` drops NaNs: a block with a NaN or an infinity gets a NaN scale.
    finite = tl.min(tl.where(magnitude <= FLOAT32_MAX, 1, 0), axis=2)
    d = tl.math.div_rn(largest, tl.full(largest.shape, 127.0, tl.float32))
    d = tl.where(finite == 1, d, NAN)
    positive = d > 0
    safe = tl.broadcast_to(tl.where(positive, d, 1.0)[:, :, None], blocks.shape)
    ratio = tl.where(positive[:, :, None], tl.math.div_rn(blocks, safe), 0.0)
    whole = ratio.to(tl.int32).to(tl.float32)
    step = tl.where(ratio > 0, 1.0, -1.0)
    codes = tl.where(tl.abs(ratio - whole) >= 0.5, whole + step, whole)
    return codes, d


@triton.jit
def quantized_activations(x):
    """The activations ``(tokens, columns)`` as the products see them:
    ``d * q`` per block (`quantize_blocks`), float32."""
    codes, d = quantize_blocks(x)
    return tl.reshape(d[:, :, None] * codes, (x.shape[0], x.shape[1]))


@triton.jit
def quantize_kernel(
    codes,
    scales,
    x,
    tokens,
    cols,
    x_stride,
    ROWS: tl.constexpr,
    WIDTH: tl.constexpr,
):
    # A (ROWS x WIDTH) tile of the activations per program: int8 codes
    # ``(tokens, cols)`` and float32 scales ``(tokens, cols / 32)``,
    # contiguous.
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)[:, None]
    column = tl.program_id(1) * WIDTH + tl.arange(0, WIDTH)[None, :]
    mask = (row < tokens) & (column < cols)
    values = load_or_zero(x + row * x_stride + column, mask, tl.float32)
    quantised, d = quantize_blocks(values)
    quantised = tl.reshape(quantised, (ROWS, WIDTH)).to(tl.int8)
    tl.store(codes + row * cols + column, quantised, mask=mask)
    block = tl.program_id(1) * (WIDTH // 32) + tl.arange(0, WIDTH // 32)[None, :]
    blocks = cols // 32
    tl.store(scales + row * blocks + block, d, mask=(row < tokens) & (block < blocks))


# -- the products ---------------------------------------------------------------------


@triton.jit
def product_vector_kernel(
    out,
    weight,
    x,
    one,
    rows,
    groups,
    weight_stride,
    x_stride,
    out_stride,
    TYPE: tl.constexpr,
    GROUP: tl.constexpr,
    PER_BLOCK: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,
    OFFSET: tl.constexpr,
    STRIDE_ALIGN: tl.constexpr,
    TOKENS: tl.constexpr,
    TOKEN_BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    STEP: tl.constexpr,
):
    # One program per `ROWS` weight rows and every token: a tile of groups
    # is dequantised once per step and meets each token's quantised
    # activations in a multiply-and-sum per row.
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    row_offset = row * weight_stride * STRIDE_ALIGN
    token = tl.arange(0, TOKEN_BLOCK)[:, None]
    total = tl.zeros([TOKEN_BLOCK, ROWS], tl.float32)
    for first in range(0, groups, STEP):
        values = weight_values(
            weight,
            row_offset,
            row_mask,
            first,
            groups,
            one,
            STEP,
            TYPE,
            GROUP,
            PER_BLOCK,
            BLOCK_BYTES,
            OFFSET,
            False,
        )
        column = first * GROUP + tl.arange(0, STEP * GROUP)[None, :]
        column_mask = column < groups * GROUP
        for t in tl.static_range(TOKENS):
            activations = load_or_zero(
                x + t * x_stride + column, column_mask, tl.float32
            )
            partial = tl.sum(values * quantized_activations(activations), axis=1)
            total += tl.where(token == t, partial[None, :], 0.0)
    target = out + token.to(tl.int64) * out_stride + row[None, :]
    store_as(target, total, (token < TOKENS) & row_mask[None, :])


@triton.jit
def product_tile_kernel(
    out,
    weight,
    codes,
    scales,
    tokens,
    rows,
    groups,
    weight_stride,
    out_stride,
    TYPE: tl.constexpr,
    GROUP: tl.constexpr,
    PER_BLOCK: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,
    OFFSET: tl.constexpr,
    STRIDE_ALIGN: tl.constexpr,
    TOKEN_BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # A (TOKEN_BLOCK x ROWS) output tile per program, one weight group per
    # step: the activation codes times the weight codes on tensor cores
    # (exact), then scaled.
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    row_offset = row * weight_stride * STRIDE_ALIGN
    token = (tl.program_id(1) * TOKEN_BLOCK + tl.arange(0, TOKEN_BLOCK)).to(tl.int64)
    token_mask = (token < tokens)[:, None]
    cols = groups * GROUP
    code_rows = codes + token[:, None] * cols
    scale_rows = scales + token * (cols // 32)
    position = tl.arange(0, GROUP)[None, :]
    total = tl.zeros([TOKEN_BLOCK, ROWS], tl.float32)
    for index in range(0, groups):
        base = (row_offset + (index // PER_BLOCK) * BLOCK_BYTES)[:, None]
        part = tl.full([1, 1], index % PER_BLOCK, tl.int32)
        weight_codes, scale, offset = group_codes(
            weight, base, part, row_mask[:, None], 1.0, TYPE, False
        )
        weight_codes = tl.reshape(weight_codes, (ROWS, GROUP)).to(tl.float16)
        x_codes = tl.load(
            code_rows + index * GROUP + position, mask=token_mask, other=0
        )
        x_codes = x_codes.to(tl.float16)
        dot = tl.dot(x_codes, tl.trans(weight_codes))
        d = tl.load(scale_rows + (index * GROUP) // 32, mask=token < tokens, other=0.0)
        factor = d[:, None] * tl.reshape(scale, (1, ROWS))
        total += factor * dot
        if OFFSET:
            sums = tl.sum(x_codes.to(tl.float32), axis=1)
            total += (d * sums)[:, None] * tl.reshape(offset, (1, ROWS))
    target = out + token[:, None] * out_stride + row[None, :]
    store_as(target, total, token_mask & row_mask[None, :])


QUANTIZE_KERNEL = Kernel(quantize_kernel)
PRODUCT_VECTOR_KERNEL = Kernel(product_vector_kernel)
PRODUCT_TILE_KERNEL = Kernel(product_tile_kernel)

# Tokens up to which the products take the vector kernel (decoding).
VECTOR_MAX_TOKENS = 8

# Values a program of the row-streaming kernels holds at once. Under the
# interpreter a program is a sequence of NumPy steps, so it takes large ones.
GPU_TILE_VALUES = 2048
INTERPRETER_TILE_VALUES = 262144


def tile_values() -> int:
    return INTERPRETER_TILE_VALUES if INTERPRETER else GPU_TILE_VALUES


def previous_power_of_two(value: int) -> int:
    """The largest power of two at most `value` (1 for `value` <= 1)."""
    return 1 << max(int(value).bit_length() - 1, 0)


def groups_per_step(group: int, groups: int, width: int) -> int:
    """Groups per step: a power of two of about `width` values, no more than
    the row's `groups` need."""
    return min(next_power_of_two(max(1, width // group)), next_power_of_two(groups))


class QuantisedProduct:
    """The launch of ``out = quantised(x) @ dequantize(weight)[:row].T``
    shared by `ggml_mul_mat_vec_a8` and `ggml_mul_mat_a8` (the same product
    for few or many tokens): up to `VECTOR_MAX_TOKENS` tokens the vector
    kernel, from there the activations quantised once and the tiled
    kernel."""

    def plan_product(self, args) -> None:
        weight, x, out = args.weight, args.x, args.out
        tokens, cols, rows = self.tokens, self.cols, self.rows
        geometry = group_constexprs(args.quant_type)
        group = geometry["GROUP"]
        groups = cols // group
        self.empty = tokens == 0 or rows == 0
        self.vector = tokens <= VECTOR_MAX_TOKENS
        weight_stride_units, alignment = weight_row_stride(weight)
        geometry.update(alignment)
        if self.vector:
            if INTERPRETER:
                # Steps narrower than most tests' rows, so that the loop runs.
                step = groups_per_step(group, groups, 512)
                per_program = tile_values() // (step * group)
            else:
                # Each program quantises the activations again: more rows per
                # program share that work on large weights, while small ones
                # keep about 256 programs to fill the GPU.
                per_program = min(max(4, previous_power_of_two(rows // 256)), 16)
                step = groups_per_step(group, groups, 512 if per_program <= 4 else 256)
            per_program = max(1, min(per_program, next_power_of_two(rows)))
            self._launch = PRODUCT_VECTOR_KERNEL.bind(
                grid=(-(-rows // per_program),),
                arguments=(
                    out,
                    weight,
                    x,
                    1.0,
                    rows,
                    groups,
                    weight_stride_units,
                    x.strides[0],
                    out.strides[0],
                ),
                constexprs={
                    **geometry,
                    "TOKENS": tokens,
                    "TOKEN_BLOCK": next_power_of_two(tokens),
                    "ROWS": per_program,
                    "STEP": step,
                },
                device=self.device,
            )
        else:
            self.plan_tiles(
                geometry, tokens, rows, groups, weight, weight_stride_units, x, out
            )
        self.overlap = OverlapGuard(out, (weight, x))

    def plan_tiles(
        self, geometry, tokens, rows, groups, weight, stride_units, x, out
    ) -> None:
        cols = groups * geometry["GROUP"]
        if INTERPRETER:
            width = min(next_power_of_two(cols), 4096)
            quantize_rows = max(
                1, min(tile_values() // width, next_power_of_two(tokens))
            )
            # Tiles smaller than some tests' tokens and rows, so that the
            # grid has edges in both dimensions.
            token_block = min(next_power_of_two(tokens), 64)
            per_program = max(16, min(next_power_of_two(rows), 512))
        else:
            width = min(next_power_of_two(cols), 1024)
            quantize_rows = max(1, 2048 // width)
            token_block = 64 if tokens > 32 else 32 if tokens > 16 else 16
            per_program = 64
        # 8 warps for the (64 x 64) tile: 4 need about 250 registers a thread.
        warps = 8 if token_block * per_program >= 4096 else 4
        self.code_shape = (tokens, cols)
        self.scale_shape = (tokens, cols // ACTIVATION_BLOCK)
        self._quantize = QUANTIZE_KERNEL.bind(
            grid=(-(-tokens // quantize_rows), -(-cols // width)),
            arguments=(
                Pointer("int8"),
                Pointer("float32"),
                x,
                tokens,
                cols,
                x.strides[0],
            ),
            constexprs={"ROWS": quantize_rows, "WIDTH": width},
            device=self.device,
        )
        self._tiles = PRODUCT_TILE_KERNEL.bind(
            grid=(-(-rows // per_program), -(-tokens // token_block)),
            arguments=(
                out,
                weight,
                Pointer("int8"),
                Pointer("float32"),
                tokens,
                rows,
                groups,
                stride_units,
                out.strides[0],
            ),
            constexprs={
                **geometry,
                "TOKEN_BLOCK": token_block,
                "ROWS": per_program,
            },
            device=self.device,
            num_warps=warps,
        )
        self._launch = self._quantised_tiles

    def _quantised_tiles(self, stream, out, weight, x) -> None:
        import torch

        with stream_context(self.device, stream):
            codes = torch.empty(self.code_shape, dtype=torch.int8, device=x.device)
            scales = torch.empty(self.scale_shape, dtype=torch.float32, device=x.device)
        self._quantize(stream, codes, scales, x)
        self._tiles(stream, out, weight, codes, scales)

    def launch(self, stream, weight, x, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (weight, x)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, weight, x)
                out.copy_(staging)
            return
        self._launch(stream, out, weight, x)
