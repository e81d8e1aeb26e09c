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
them unaligned) and decodes the K-quants' 6-bit and 4-bit scales. A
``(rows, groups, GROUP)`` tile is in column order (groups cover consecutive
values); the kernels address columns as ``group * GROUP + position`` and
never flatten it, which would move it through shared memory (so the
nibble-pair types load each code byte once per nibble, the second time from
the cache, rather than unpack a ``(..., 2, 16)`` tile and reshape it).

The three operators share the helpers:

- `ggml_dequantize` (`weight_values`) turns a tile into float32 values with
  the operations and operand order of llama.cpp's reference (`gguf.quants`):
  ``scale * code``, then the offset added. With ``EXACT`` the products pass
  through a multiply by the runtime argument `one` (1.0) first: the compiler
  may fuse a product into the add that follows (a fused multiply-add rounds
  once, not twice) but cannot see through an unknown factor, and ``fma(p, 1,
  c)`` is ``p + c``, so the results equal `gguf.quants.dequantize` bit for
  bit on GPUs as under the interpreter.
- The products first quantise the activations once (`quantize_kernel`) into
  a scratch buffer on the caller's stream: int8 codes and a float32 scale
  per block of 32 values, as llama.cpp's Q8_1 and the CPU kernels do
  (`quantize_blocks`: ``d = absmax / 127`` and codes ``round(x / d)``, with
  correctly rounded float32 divisions and halves away from zero; codes 0
  where ``d`` is 0, and a NaN scale for a block holding a NaN or an
  infinity). A weight group then meets the activation codes in exact
  integer dot products, scaled by the group's scale and the block's ``d``
  (plus the group's offset times the codes' sum), summed in float32: the
  product of the quantised activations with the dequantised weight up to
  float32 rounding.
- Up to `VECTOR_MAX_TOKENS` tokens (decoding), `product_vector_kernel`: one
  program per 4 or 8 weight rows streams their blocks once, 512 values of
  each row per step, and every token's codes are loaded beside them (each
  row's copy from the cache, so that both tiles share one register layout
  and nothing moves through shared memory).
- From there, `product_kernel`: a (tokens x 64 rows) tile per program, one
  weight group per step, the integer dot products on tensor cores (`tl.dot`
  of float16 operands, which hold the codes exactly, accumulated exactly in
  float32: at most 32 products of 8-bit codes), as llama.cpp's MMQ kernels.
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
def _factors(weight, offset, mask, LENGTH: tl.constexpr):
    """The one (`LENGTH` 2) or two (4) little-endian float16 at byte
    `offset` ``(rows, groups)``, any alignment, as float32 (0 where masked):
    ``(first, second)``, the first twice for one. The bytes are loaded as
    one run, a single load where their alignment allows; their bits are
    disjoint, so their shifted sum is the word."""
    position = tl.arange(0, LENGTH)[None, None, :]
    packed = tl.load(
        weight + offset[:, :, None] + position, mask=mask[:, :, None], other=0
    )
    word = tl.sum(packed.to(tl.int32) << (8 * position), axis=2)
    first = (word & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    first = first.to(tl.float32)
    if LENGTH == 4:
        second = (word >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
        second = second.to(tl.float32)
    else:
        second = first
    return first, second


@triton.jit
def _bytes(weight, offset, mask, LENGTH: tl.constexpr):
    """`LENGTH` consecutive bytes from `offset` ``(rows, groups)``: ``(rows,
    groups, LENGTH)`` int32."""
    at = offset[:, :, None] + tl.arange(0, LENGTH)[None, None, :]
    return tl.load(weight + at, mask=mask[:, :, None], other=0).to(tl.int32)


@triton.jit
def _nibble_pairs(weight, offset, mask, high_bits, HIGH: tl.constexpr):
    """The 32 codes of 16 bytes of nibble pairs (the low nibbles are values
    0-15, the high ones 16-31): ``(rows, groups, 32)`` int32. Each byte is
    loaded for both of its values (the second load hits the cache): an
    unpacked (rows, groups, 2, 16) tile reshaped to 32 values would take
    another layout than the activations and be moved through shared memory.
    With `HIGH`, bit ``j`` of the little-endian 32-bit word at `high_bits`
    (any alignment) is bit 4 of code ``j`` (Q5_0, Q5_1)."""
    value = tl.arange(0, 32)[None, None, :]
    at = offset[:, :, None] + value % 16
    packed = tl.load(weight + at, mask=mask[:, :, None], other=0).to(tl.int32)
    codes = (packed >> (4 * (value // 16))) & 15
    if HIGH:
        position = tl.arange(0, 4)[None, None, :]
        word = tl.load(
            weight + high_bits[:, :, None] + position, mask=mask[:, :, None], other=0
        )
        # The bytes' bits are disjoint: their sum is the word.
        word = tl.sum(word.to(tl.int32) << (8 * position), axis=2)
        codes = codes | (((word[:, :, None] >> value) & 1) << 4)
    return codes


# -- one helper per type: ``(rows, groups)`` block offsets `base` and group
# indices in the block `group` -> ``(codes (rows, groups, GROUP) int32, scale,
# offset)``, scale and offset ``(rows, groups)`` float32 (the offset is the
# scale again for the types without one). With `EXACT` the products feeding
# an add are multiplied by `one` (see the module doc). -----------------------------


@triton.jit
def q4_0_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d, _ = _factors(weight, base, mask, 2)
    return _nibble_pairs(weight, base + 2, mask, base, False) - 8, d, d


@triton.jit
def q4_1_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d, m = _factors(weight, base, mask, 4)
    return _nibble_pairs(weight, base + 4, mask, base, False), d, m


@triton.jit
def q5_0_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d, _ = _factors(weight, base, mask, 2)
    return _nibble_pairs(weight, base + 6, mask, base + 2, True) - 16, d, d


@triton.jit
def q5_1_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d, m = _factors(weight, base, mask, 4)
    return _nibble_pairs(weight, base + 8, mask, base + 4, True), d, m


@triton.jit
def q8_0_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    d, _ = _factors(weight, base, mask, 2)
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
    packed = _bytes(weight, base + 16 + 32 * (group // 8) + 16 * (group % 2), mask, 16)
    codes = (packed >> (2 * field)[:, :, None]) & 3
    scales = tl.load(weight + base + group, mask=mask, other=0).to(tl.int32)
    d, dmin = _factors(weight, base + 80, mask, 4)
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
    low = _bytes(weight, base + 32 + 32 * half + 16 * side, mask, 16)
    low = (low >> (2 * field)[:, :, None]) & 3
    high = _bytes(weight, base + 16 * side, mask, 16)
    high = (high >> (4 * half + field)[:, :, None]) & 1
    scale_low = tl.load(weight + base + 96 + group % 8, mask=mask, other=0)
    scale_low = (scale_low.to(tl.int32) >> (4 * half)) & 15
    scale_high = tl.load(weight + base + 104 + group % 4, mask=mask, other=0)
    scale_high = (scale_high.to(tl.int32) >> (2 * (group // 4))) & 3
    d, _ = _factors(weight, base + 108, mask, 2)
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
    d, dmin = _factors(weight, base, mask, 4)
    scale = d * scale_code.to(tl.float32)
    minimum = dmin * min_code.to(tl.float32)
    if EXACT:
        minimum = minimum * one
    return codes, scale, -minimum


@triton.jit
def q4_k_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    # Group `j` is the low (even `j`) or high nibbles of bytes ``16 + 32 (j /
    # 2)`` onwards.
    packed = _bytes(weight, base + 16 + 32 * (group // 2), mask, 32)
    codes = (packed >> (4 * (group % 2))[:, :, None]) & 15
    return _k_values(weight, base, group, mask, codes, one, EXACT)


@triton.jit
def q5_k_group(weight, base, group, mask, one, EXACT: tl.constexpr):
    # As Q4_K from byte 48, with bit `j` of high byte ``16 + l`` as bit 4 of
    # value `l` of group `j`.
    packed = _bytes(weight, base + 48 + 32 * (group // 2), mask, 32)
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
    low = _bytes(weight, base + 64 * half + 32 * (field % 2) + 16 * side, mask, 16)
    low = (low >> (4 * (field // 2))[:, :, None]) & 15
    high = _bytes(weight, base + 128 + 32 * half + 16 * side, mask, 16)
    high = (high >> (2 * field)[:, :, None]) & 3
    scales = tl.load(weight + base + 192 + group, mask=mask, other=0)
    d, _ = _factors(weight, base + 208, mask, 2)
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
    weight rows at byte offsets `row_offset` ``(rows,)``: ``(rows, STEP,
    GROUP)``, ``scale * code (+ offset)``. Groups from `groups` (the row's
    end) and masked rows are zeros. Kept three-dimensional: flattening to
    ``(rows, values)`` would move the tile through shared memory."""
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
    return values


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
def quantize_kernel(
    scratch,
    x,
    tokens,
    cols,
    x_stride,
    scale_offset,
    ROWS: tl.constexpr,
    WIDTH: tl.constexpr,
):
    # A (ROWS x WIDTH) tile of the activations per program, written to
    # `scratch`: int8 codes ``(tokens, cols)``, and float32 scales ``(tokens,
    # cols / 32)`` from byte `scale_offset` (a multiple of 16).
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)[:, None]
    column = tl.program_id(1) * WIDTH + tl.arange(0, WIDTH)[None, :]
    mask = (row < tokens) & (column < cols)
    values = load_or_zero(x + row * x_stride + column, mask, tl.float32)
    codes, d = quantize_blocks(values)
    codes = tl.reshape(codes, (ROWS, WIDTH)).to(tl.int8)
    tl.store(scratch + row * cols + column, codes, mask=mask)
    scales = (scratch + scale_offset).to(tl.pointer_type(tl.float32), bitcast=True)
    block = tl.program_id(1) * (WIDTH // 32) + tl.arange(0, WIDTH // 32)[None, :]
    blocks = cols // 32
    tl.store(scales + row * blocks + block, d, mask=(row < tokens) & (block < blocks))


@triton.jit
def product_kernel(
    out,
    weight,
    scratch,
    tokens,
    rows,
    groups,
    weight_stride,
    out_stride,
    scale_offset,
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
    code_rows = scratch + token[:, None] * cols
    scales = (scratch + scale_offset).to(tl.pointer_type(tl.float32), bitcast=True)
    scale_rows = scales + token * (cols // 32)
    position = tl.arange(0, GROUP)[None, :]
    total = tl.zeros([TOKEN_BLOCK, ROWS], tl.float32)
    for index in range(0, groups):
        base = (row_offset + (index // PER_BLOCK) * BLOCK_BYTES)[:, None]
        part = (index % PER_BLOCK) + tl.zeros([1, 1], tl.int32)
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
        total += d[:, None] * tl.reshape(scale, (1, ROWS)) * dot
        if OFFSET:
            sums = tl.sum(x_codes.to(tl.float32), axis=1)
            total += (d * sums)[:, None] * tl.reshape(offset, (1, ROWS))
    target = out + token[:, None] * out_stride + row[None, :]
    store_as(target, total, token_mask & row_mask[None, :])


@triton.jit
def product_vector_kernel(
    out,
    weight,
    scratch,
    rows,
    groups,
    weight_stride,
    out_stride,
    scale_offset,
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
    # One program per `ROWS` weight rows and every token: a (rows x STEP
    # groups) tile of weight codes per step meets each token's activation
    # codes in integer dot products per group, then the groups' scales.
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    row_offset = row * weight_stride * STRIDE_ALIGN
    cols = groups * GROUP
    scales = (scratch + scale_offset).to(tl.pointer_type(tl.float32), bitcast=True)
    token = tl.arange(0, TOKEN_BLOCK)[:, None]
    total = tl.zeros([TOKEN_BLOCK, ROWS], tl.float32)
    for first in range(0, groups, STEP):
        index = first + tl.arange(0, STEP)
        inside = index < groups
        base = row_offset[:, None] + ((index // PER_BLOCK) * BLOCK_BYTES)[None, :]
        codes, scale, offset = group_codes(
            weight,
            base,
            (index % PER_BLOCK)[None, :],
            row_mask[:, None] & inside[None, :],
            1.0,
            TYPE,
            False,
        )
        column = (index * GROUP)[None, :, None] + tl.arange(0, GROUP)[None, None, :]
        # Every row's copy of the activation codes is loaded (from the
        # cache): a (rows, groups, GROUP) load takes the weight codes' layout,
        # where one (1, groups, GROUP) load would make the compiler move the
        # weight tile through shared memory to meet it.
        column = column + tl.zeros([ROWS, 1, 1], tl.int32)
        for t in tl.static_range(TOKENS):
            x_codes = tl.load(
                scratch + t * cols + column, mask=inside[None, :, None], other=0
            ).to(tl.int32)
            d = tl.load(scales + t * (cols // 32) + (index * GROUP) // 32, mask=inside)
            dots = tl.sum(codes * x_codes, axis=2).to(tl.float32)
            terms = scale * dots
            if OFFSET:
                terms += offset * tl.sum(x_codes, axis=2).to(tl.float32)
            partial = tl.sum(terms * d[None, :], axis=1)
            total += tl.where(token == t, partial[None, :], 0.0)
    target = out + token.to(tl.int64) * out_stride + row[None, :]
    store_as(target, total, (token < TOKENS) & row_mask[None, :])


QUANTIZE_KERNEL = Kernel(quantize_kernel)

# Tokens up to which the products take `product_vector_kernel` (decoding).
VECTOR_MAX_TOKENS = 8
PRODUCT_KERNEL = Kernel(product_kernel)
PRODUCT_VECTOR_KERNEL = Kernel(product_vector_kernel)

# Values a program of `ggml_dequantize` or `quantize_kernel` holds at once.
# Under the interpreter a program is a sequence of NumPy steps, so it takes
# large ones.
GPU_TILE_VALUES = 2048
INTERPRETER_TILE_VALUES = 262144


def tile_values() -> int:
    return INTERPRETER_TILE_VALUES if INTERPRETER else GPU_TILE_VALUES


def groups_per_step(group: int, groups: int, width: int) -> int:
    """Groups per step: a power of two of about `width` values, no more than
    the row's `groups` need."""
    return min(next_power_of_two(max(1, width // group)), next_power_of_two(groups))


def product_tiles(tokens: int, rows: int) -> tuple[int, int, int]:
    """``(TOKEN_BLOCK, ROWS, num_warps)`` of `product_kernel`."""
    if INTERPRETER:
        # Few programs (each is a sequence of NumPy steps per group), but
        # token tiles smaller than some tests' tokens, so that the grid has
        # edges in both dimensions.
        return max(16, min(next_power_of_two(tokens), 64)), 1024, 4
    if tokens <= 16:
        # Few tokens: narrower tiles keep enough programs on small weights.
        return 16, 32 if rows >= 4096 else 16, 4
    if tokens <= 32:
        return 32, 64, 4
    # 8 warps for the (64 x 64) tile: 4 need about 250 registers a thread.
    return 64, 64, 8


def vector_tiles(rows: int, group: int, groups: int) -> tuple[int, int]:
    """``(ROWS, STEP)`` of `product_vector_kernel`: rows per program and
    groups per step."""
    if INTERPRETER:
        # Steps narrower than some tests' rows, so that the loop runs.
        return 1024, groups_per_step(group, groups, 512)
    # About 256 programs or more (a row per warp at first, then two), each
    # step 512 values of each row.
    return (4 if rows < 2048 else 8), groups_per_step(group, groups, 512)


class QuantisedProduct:
    """The launch of ``out = quantised(x) @ dequantize(weight)[:row].T``
    shared by `ggml_mul_mat_vec_a8` and `ggml_mul_mat_a8` (the same product
    for few or many tokens): `quantize_kernel` into a scratch buffer, then
    `product_vector_kernel` up to `VECTOR_MAX_TOKENS` tokens and
    `product_kernel` from there."""

    def plan_product(self, args) -> None:
        weight, x, out = args.weight, args.x, args.out
        tokens, cols, rows = self.tokens, self.cols, self.rows
        geometry = group_constexprs(args.quant_type)
        groups = cols // geometry["GROUP"]
        stride_units, alignment = weight_row_stride(weight)
        self.empty = tokens == 0 or rows == 0
        # The scratch buffer: the codes, then the scales 16-byte aligned.
        scale_offset = -(-tokens * cols // 16) * 16
        self.scratch_bytes = scale_offset + 4 * tokens * (cols // ACTIVATION_BLOCK)
        width = min(next_power_of_two(cols), 4096 if INTERPRETER else 1024)
        quantize_rows = max(1, min(tile_values() // width, next_power_of_two(tokens)))
        self._quantize = QUANTIZE_KERNEL.bind(
            grid=(-(-tokens // quantize_rows), -(-cols // width)),
            arguments=(Pointer("int8"), x, tokens, cols, x.strides[0], scale_offset),
            constexprs={"ROWS": quantize_rows, "WIDTH": width},
            device=self.device,
        )
        arguments = (
            out,
            weight,
            Pointer("int8"),
            tokens,
            rows,
            groups,
            stride_units,
            out.strides[0],
            scale_offset,
        )
        constexprs = {**geometry, **alignment}
        if tokens <= VECTOR_MAX_TOKENS:
            per_program, step = vector_tiles(rows, geometry["GROUP"], groups)
            per_program = min(per_program, next_power_of_two(rows))
            self._product = PRODUCT_VECTOR_KERNEL.bind(
                grid=(-(-rows // per_program),),
                arguments=arguments[:3] + arguments[4:],
                constexprs={
                    **constexprs,
                    "TOKENS": tokens,
                    "TOKEN_BLOCK": next_power_of_two(tokens),
                    "ROWS": per_program,
                    "STEP": step,
                },
                device=self.device,
            )
        else:
            token_block, per_program, warps = product_tiles(tokens, rows)
            per_program = max(16, min(per_program, next_power_of_two(rows)))
            self._product = PRODUCT_KERNEL.bind(
                grid=(-(-rows // per_program), -(-tokens // token_block)),
                arguments=arguments,
                constexprs={
                    **constexprs,
                    "TOKEN_BLOCK": token_block,
                    "ROWS": per_program,
                },
                device=self.device,
                num_warps=warps,
            )
        self.overlap = OverlapGuard(out, (weight, x))

    def _run(self, stream, out, weight, x) -> None:
        import torch

        with stream_context(self.device, stream):
            scratch = torch.empty(self.scratch_bytes, dtype=torch.int8, device=x.device)
        self._quantize(stream, scratch, x)
        self._product(stream, out, weight, scratch)

    def launch(self, stream, weight, x, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (weight, x)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._run(stream, staging, weight, x)
                out.copy_(staging)
            return
        self._run(stream, out, weight, x)
