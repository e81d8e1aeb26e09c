"""The interleaved GGML layout on the CPU (`ggml_interleave`,
`ggml_mul_mat_interleaved_a8`; the layout is described in
`infini.ops.base.ggml_interleave`).

In the file's layout a weight row's blocks follow each other, so a product
reduces each block's integer sums to one number before it can apply the
block's scale: about 17 instructions per 32 weights of Q4_1 on AVX2, and
the products run at 8 to 9 GB/s per core, short of the memory. With eight
rows side by side, four bytes of each row's codes fill one 32-byte
vector: one byte multiply-add against four broadcast activation codes
leaves every row's partial sum in its own lane, the eight rows' scales load
as one vector of halves, and the eight results leave the loop as one float
vector, with no horizontal sum at all: about 6 instructions per 32 weights.

The tokens of a product share each block's unpacked codes: the token loop
is inside the block loop, and each token's eight running sums live in a
small float32 scratch (where the CPU has AMX-INT8, products of a few tokens
run on its tiles instead: `ggml_amx`). With byte dot products (VNNI) this
kernel is the product at any number of tokens; without them, from
`INTERLEAVED_TILED_MIN_TOKENS` tokens the product is the tiled BLAS path of
`infini.ops.native.cpu.ggml`, over panels put back into the file's layout
first.
"""

from __future__ import annotations

import ctypes
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
    Q4_K,
    Q5_0,
    Q5_1,
    Q6_K,
    Q8_0,
    row_bytes,
)

from .dtype_io import loader, storer
from .ggml import (
    _MADD,
    SIGNED_BIAS,
    ProductPlan,
    TiledProductPlan,
    dot_bytes,
    quantize_batch,
    signs_moved,
    vnni_instructions,
    x86_madd_instructions,
)
from .jit import helper, kernel
from .memory import STORAGE, element_array
from .vector_ir import (
    F32,
    I8,
    I16,
    I32,
    add_offset,
    carried_loop,
    constant_splat,
    declare,
    i64,
    integers,
    load_vector,
    prefetch_lines,
    splat,
)


class TileLayout:
    """Where the fields of one row's block are (the file's layout) and how
    many bytes of codes it has: `minimum` and `high_bits` are byte offsets
    or None; `offset` is the code offset of the formats without a minimum
    (``d * (q - offset)``); `signed` codes are Q8_0's."""

    def __init__(self, quant_type, minimum, high_bits, codes, offset, signed=False):
        entry = GGML_TYPES[quant_type]
        self.block_bytes = entry.block_bytes
        self.minimum, self.high_bits, self.codes = minimum, high_bits, codes
        self.code_bytes = entry.block_bytes - codes
        self.offset, self.signed = offset, signed
        rows = INTERLEAVED_ROWS
        # Offsets in a tile block (the eight rows' blocks of one column).
        self.tile_minimum = 2 * rows
        self.tile_high_bits = self.tile_minimum + (2 * rows if minimum else 0)
        self.tile_codes = self.tile_high_bits + (4 * rows if high_bits else 0)
        # Four codes of each row per step.
        self.steps = self.code_bytes // 4
        self.quant_type = quant_type

    def __repr__(self) -> str:
        # Stable across processes: the kernels' cache keys hold it.
        return f"TileLayout({GGML_TYPES[self.quant_type].name})"


TILE_LAYOUTS = {
    Q4_0: TileLayout(Q4_0, None, None, 2, 8),
    Q4_1: TileLayout(Q4_1, 2, None, 4, 0),
    Q5_0: TileLayout(Q5_0, None, 2, 6, 16),
    Q5_1: TileLayout(Q5_1, 2, 4, 8, 0),
    Q8_0: TileLayout(Q8_0, None, None, 2, 0, signed=True),
}


class K4TileLayout:
    """Q4_K's tile block (eight rows' super-blocks of 256 values, 1,152
    bytes): the eight ``d`` (16 bytes), the eight ``dmin`` (16), per group
    ``j`` of 32 values 12 bytes of the eight rows' 6-bit scales and mins
    (`K4_SCALES`), then per pair of groups ``i`` (the low and high nibbles
    of the same code bytes) eight steps of 32 bytes, bytes ``32 i + 4 k``
    to ``32 i + 4 k + 3`` of each row."""

    quant_type = Q4_K
    block_bytes = GGML_TYPES[Q4_K].block_bytes
    tile_minimum = 2 * INTERLEAVED_ROWS
    tile_scales = 4 * INTERLEAVED_ROWS
    tile_codes = tile_scales + 8 * 12
    offset = 0
    signed = False

    def __repr__(self) -> str:
        return "K4TileLayout(Q4_K)"


TILE_LAYOUTS[Q4_K] = K4TileLayout()


class K6TileLayout:
    """Q6_K's tile block (eight rows' super-blocks, 1,680 bytes): the eight
    ``d`` (16 bytes), per 16 values ``t`` the eight rows' int8 scales (8
    bytes each, 128), then per half ``h`` of the super-block and step ``s``
    96 bytes: bytes ``64h + 4s`` to ``64h + 4s + 3`` of each row's low
    nibbles (values ``128h + 4s..`` and ``128h + 64 + 4s..``), bytes ``64h
    + 32 + 4s..`` (values ``128h + 32 + 4s..`` and ``128h + 96 + 4s..``),
    then bytes ``32h + 4s..`` of each row's high bits, 32 bytes each, row
    after row."""

    quant_type = Q6_K
    block_bytes = GGML_TYPES[Q6_K].block_bytes
    tile_scales = 2 * INTERLEAVED_ROWS
    tile_codes = tile_scales + 16 * INTERLEAVED_ROWS
    offset = 32
    signed = False

    def __repr__(self) -> str:
        return "K6TileLayout(Q6_K)"


TILE_LAYOUTS[Q6_K] = K6TileLayout()


def _interleave_k6(grouped: np.ndarray) -> np.ndarray:
    """Q6_K tile blocks ``(tiles, count, 1680)`` of the blocks ``(tiles,
    count, 8 rows, 210)``."""
    tiles, count, n, _ = grouped.shape
    # Codes move in groups of four bytes: as 32-bit words.
    low = grouped[..., 0:128].view(np.uint32).reshape(tiles, count, n, 2, 2, 8)
    high = grouped[..., 128:192].view(np.uint32).reshape(tiles, count, n, 2, 8)
    # (tiles, count, h, s, part, row).
    codes = np.stack(
        [
            low[:, :, :, :, 0].transpose(0, 1, 3, 4, 2),
            low[:, :, :, :, 1].transpose(0, 1, 3, 4, 2),
            high.transpose(0, 1, 3, 4, 2),
        ],
        axis=4,
    )
    parts = [
        grouped[..., 208:210].reshape(tiles, count, -1),
        np.swapaxes(grouped[..., 192:208], -1, -2).reshape(tiles, count, -1),
        np.ascontiguousarray(codes).view(np.uint8).reshape(tiles, count, -1),
    ]
    return np.concatenate(parts, axis=-1)


def _deinterleave_k6(blocks: np.ndarray, target: np.ndarray) -> None:
    """`_interleave_k6`' inverse into `target` ``(tiles, count, 8, 210)``."""
    tiles, count, n, _ = target.shape
    layout = K6TileLayout
    target[..., 208:210] = blocks[..., 0 : 2 * n].reshape(tiles, count, n, 2)
    scales = blocks[..., layout.tile_scales : layout.tile_codes]
    target[..., 192:208] = np.swapaxes(scales.reshape(tiles, count, 16, n), -1, -2)
    codes = blocks[..., layout.tile_codes :].view(np.uint32)
    codes = codes.reshape(tiles, count, 2, 8, 3, n)
    low = np.stack([codes[:, :, :, :, 0], codes[:, :, :, :, 1]], axis=3)
    # (tiles, count, h, half, s, row) -> (tiles, count, row, h, half, s).
    target[..., 0:128].view(np.uint32)[...] = low.transpose(0, 1, 5, 2, 3, 4).reshape(
        tiles, count, n, 32
    )
    target[..., 128:192].view(np.uint32)[...] = (
        codes[:, :, :, :, 2].transpose(0, 1, 4, 2, 3).reshape(tiles, count, n, 16)
    )


# Per group of a Q4_K tile block: the eight rows' scales as a 32-bit word
# of low nibbles (row ``r`` in bits ``4r..4r+3``) and a 16-bit word of top
# two bits (bits ``2r..2r+1``), then the mins the same way: 12 bytes.
K4_SCALES = 12


def _k4_scales_mins(scale_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 6-bit scales and mins ``(..., 8)`` of Q4_K's 12 packed bytes
    ``(..., 12)`` (`infini.ops.base._ggml` describes the packing)."""
    b = scale_bytes.astype(np.uint8)
    low, high, mixed = b[..., 0:4], b[..., 4:8], b[..., 8:12]
    scales = np.concatenate([low & 63, (mixed & 15) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([high & 63, (mixed >> 4) | ((high >> 6) << 4)], axis=-1)
    return scales, mins


def _k4_pack(scales: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """`_k4_scales_mins`' inverse: the 12 packed bytes."""
    low = (scales[..., 0:4] & 63) | ((scales[..., 4:8] >> 4) << 6)
    high = (mins[..., 0:4] & 63) | ((mins[..., 4:8] >> 4) << 6)
    mixed = (scales[..., 4:8] & 15) | ((mins[..., 4:8] & 15) << 4)
    return np.concatenate([low, high, mixed], axis=-1).astype(np.uint8)


def _rows_packed(values: np.ndarray) -> np.ndarray:
    """Eight rows' 6-bit values ``(..., 8 rows)`` as 6 bytes: the low
    nibbles as a little-endian 32-bit word, then the top two bits as a
    16-bit one."""
    shifts = np.arange(8, dtype=np.uint32)
    values = values.astype(np.uint32)
    nibbles = ((values & 15) << (4 * shifts)).sum(axis=-1, dtype=np.uint32)
    tops = ((values >> 4) << (2 * shifts)).sum(axis=-1, dtype=np.uint32)
    out = np.empty(values.shape[:-1] + (6,), np.uint8)
    out[..., 0:4] = nibbles[..., None].view(np.uint8).reshape(out.shape[:-1] + (4,))
    out[..., 4:6] = (
        tops.astype(np.uint16)[..., None].view(np.uint8).reshape(out.shape[:-1] + (2,))
    )
    return out


def _rows_unpacked(packed: np.ndarray) -> np.ndarray:
    """`_rows_packed`' inverse: ``(..., 8 rows)`` values."""
    nibbles = np.ascontiguousarray(packed[..., 0:4]).view(np.uint32)
    tops = np.ascontiguousarray(packed[..., 4:6]).view(np.uint16).astype(np.uint32)
    shifts = np.arange(8, dtype=np.uint32)
    return (
        ((nibbles >> (4 * shifts)) & 15) | (((tops >> (2 * shifts)) & 3) << 4)
    ).astype(np.uint8)


def _interleave_k4(grouped: np.ndarray) -> np.ndarray:
    """Q4_K tile blocks ``(tiles, count, 1152)`` of the blocks ``(tiles,
    count, 8 rows, 144)``."""
    tiles, count, n, _ = grouped.shape
    scales, mins = _k4_scales_mins(grouped[..., 4:16])  # (tiles, count, 8, 8 j)
    packed = np.concatenate(
        [
            _rows_packed(np.swapaxes(scales, -1, -2)),
            _rows_packed(np.swapaxes(mins, -1, -2)),
        ],
        axis=-1,
    )  # (tiles, count, 8 j, 12)
    # Codes move in groups of four bytes: as 32-bit words.
    codes = grouped[..., 16:].view(np.uint32).reshape(tiles, count, n, 4, 8)
    codes = np.ascontiguousarray(codes.transpose(0, 1, 3, 4, 2))
    parts = [
        grouped[..., 0:2].reshape(tiles, count, -1),
        grouped[..., 2:4].reshape(tiles, count, -1),
        packed.reshape(tiles, count, -1),
        np.ascontiguousarray(codes).view(np.uint8).reshape(tiles, count, -1),
    ]
    return np.concatenate(parts, axis=-1)


def _deinterleave_k4(blocks: np.ndarray, target: np.ndarray) -> None:
    """`_interleave_k4`' inverse into `target` ``(tiles, count, 8, 144)``."""
    tiles, count, n, _ = target.shape
    layout = K4TileLayout
    target[..., 0:2] = blocks[..., 0 : 2 * n].reshape(tiles, count, n, 2)
    target[..., 2:4] = blocks[..., 2 * n : 4 * n].reshape(tiles, count, n, 2)
    packed = blocks[..., layout.tile_scales : layout.tile_codes].reshape(
        tiles, count, 8, K4_SCALES
    )
    scales = np.swapaxes(_rows_unpacked(packed[..., 0:6]), -1, -2)
    mins = np.swapaxes(_rows_unpacked(packed[..., 6:12]), -1, -2)
    target[..., 4:16] = _k4_pack(scales, mins)
    codes = blocks[..., layout.tile_codes :].view(np.uint32)
    codes = codes.reshape(tiles, count, 4, 8, n).transpose(0, 1, 4, 2, 3)
    target[..., 16:].view(np.uint32)[...] = codes.reshape(tiles, count, n, 32)


# The high bits, rearranged: bit ``b`` of byte ``i`` of a row's word is the
# high bit of value ``4 b + i`` (``b < 4``) or ``16 + 4 (b - 4) + i``: the
# bits that one step of four codes needs are one shift away in every byte.
_HIGH_BIT_SOURCE = np.array(
    [4 * b + i if b < 4 else 16 + 4 * (b - 4) + i for i in range(4) for b in range(8)]
)
_HIGH_BIT_TARGET = np.argsort(_HIGH_BIT_SOURCE)


@cache
def _byte_tables(order: tuple[int, ...]) -> np.ndarray:
    """``tables[j, v]``: the bits of byte value `v` at byte `j` of a word,
    moved where the permutation `order` (bit ``k`` from bit ``order[k]``)
    puts them, as a 32-bit word."""
    tables = np.zeros((4, 256), np.uint32)
    values = np.arange(256, dtype=np.uint32)
    for target, source in enumerate(order):
        byte, bit = divmod(source, 8)
        tables[byte] |= ((values >> np.uint32(bit)) & np.uint32(1)) << np.uint32(target)
    return tables


def _rearranged_words(words: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each uint32 word with bit ``k`` taken from bit ``order[k]``: the
    word's four bytes looked up in `_byte_tables` and the four results
    or-ed (unpacking a byte per bit ran at 0.1 GB/s)."""
    tables = _byte_tables(tuple(int(k) for k in order))
    result = tables[0][words & np.uint32(255)]
    for byte in range(1, 4):
        result |= tables[byte][(words >> np.uint32(8 * byte)) & np.uint32(255)]
    return result


def _interleave_simple(blocks: np.ndarray, layout, out: np.ndarray) -> None:
    """`interleave` of a format of `TileLayout` into `out` (apart from
    `blocks`). Every field moves as whole 16- or 32-bit words, one strided
    NumPy copy per field straight into `out` (byte-wise transposes and
    concatenated parts ran at 0.5 GB/s, 0.37 s for Gemma-3's head)."""
    rows, width = blocks.shape
    n = INTERLEAVED_ROWS
    count = width // layout.block_bytes
    tiles = rows // n
    grouped = blocks.reshape(tiles, n, count, layout.block_bytes)
    target = out.reshape(tiles, count, n * layout.block_bytes)

    def words(offset: int, size: int, dtype) -> np.ndarray:
        """The `size` bytes at `offset` of each block as `dtype` words,
        ``(tiles, count, words, n)``: the rows of a tile side by side."""
        fields = grouped[..., offset : offset + size].view(dtype)
        return fields.transpose(0, 2, 3, 1)

    def place(start: int, values: np.ndarray) -> int:
        """Writes ``(tiles, count, words, n)`` words at byte `start` of each
        tile block; returns the byte after them."""
        size = values.shape[2] * n * values.itemsize
        view = target[..., start : start + size].view(values.dtype)
        view.reshape(values.shape)[...] = values
        return start + size

    at = place(0, words(0, 2, np.uint16))
    if layout.minimum is not None:
        at = place(at, words(layout.minimum, 2, np.uint16))
    if layout.high_bits is not None:
        high = words(layout.high_bits, 4, np.uint32)
        at = place(at, _rearranged_words(high, _HIGH_BIT_SOURCE))
    place(at, words(layout.codes, 4 * layout.steps, np.uint32))


def interleave(blocks: np.ndarray, quant_type: int, out=None) -> np.ndarray:
    """The interleaved form of a ``(rows, row_bytes)`` uint8 array of
    `quant_type` blocks (rows a multiple of `INTERLEAVED_ROWS`), written
    into `out` when given (an array of the same shape that does not
    overlap `blocks`) and returned."""
    layout = TILE_LAYOUTS[quant_type]
    rows, width = blocks.shape
    if out is None:
        out = np.empty_like(blocks)
    if quant_type not in (Q4_K, Q6_K):
        _interleave_simple(blocks, layout, out)
        return out
    n = INTERLEAVED_ROWS
    count = width // layout.block_bytes
    grouped = blocks.reshape(rows // n, n, count, layout.block_bytes).transpose(
        0, 2, 1, 3
    )
    kind = _interleave_k4 if quant_type == Q4_K else _interleave_k6
    out[...] = kind(grouped).reshape(rows, width)
    return out


def deinterleave(tiles: np.ndarray, quant_type: int, out: np.ndarray) -> None:
    """`interleave`'s inverse: the file's layout of the interleaved
    ``(rows, row_bytes)`` uint8 `tiles` into `out` (the same shape)."""
    layout = TILE_LAYOUTS[quant_type]
    rows, width = tiles.shape
    n = INTERLEAVED_ROWS
    count = width // layout.block_bytes
    blocks = tiles.reshape(rows // n, count, n * layout.block_bytes)
    target = out.reshape(rows // n, n, count, layout.block_bytes).transpose(0, 2, 1, 3)
    if quant_type == Q4_K:
        _deinterleave_k4(blocks, target)
        return
    if quant_type == Q6_K:
        _deinterleave_k6(blocks, target)
        return
    _deinterleave_simple(tiles, layout, out)


def _deinterleave_simple(tiles: np.ndarray, layout, out: np.ndarray) -> None:
    """`_interleave_simple`'s inverse, field by field as whole words (the
    tiled products put every panel back this way on every call: byte-wise
    it ran at 0.1-0.5 GB/s)."""
    rows, width = tiles.shape
    n = INTERLEAVED_ROWS
    count = width // layout.block_bytes
    source = tiles.reshape(rows // n, count, n * layout.block_bytes)
    grouped = out.reshape(rows // n, n, count, layout.block_bytes)

    def take(start: int, size: int, dtype) -> tuple[np.ndarray, int]:
        """The ``(tiles, count, words, n)`` words of `size` bytes per row
        at byte `start` of each tile block, and the byte after them."""
        end = start + size * n
        words = source[..., start:end].view(dtype)
        return words.reshape(words.shape[:2] + (-1, n)), end

    def put(offset: int, words: np.ndarray) -> None:
        """Writes the words at byte `offset` of each row's block."""
        size = words.shape[2] * words.itemsize
        view = grouped[..., offset : offset + size].view(words.dtype)
        view[...] = words.transpose(0, 3, 1, 2)

    words, at = take(0, 2, np.uint16)
    put(0, words)
    if layout.minimum is not None:
        words, at = take(at, 2, np.uint16)
        put(layout.minimum, words)
    if layout.high_bits is not None:
        words, at = take(at, 4, np.uint32)
        put(layout.high_bits, _rearranged_words(words, _HIGH_BIT_TARGET))
    words, _ = take(at, 4 * layout.steps, np.uint32)
    put(layout.codes, words)


# Vector IR of the tile product.

_LANES = INTERLEAVED_ROWS


def _pair_products(builder, codes, x, signed):
    """The 16 sums of adjacent pairs of ``codes[j] * x[j]`` (32 i8 each;
    `codes` unsigned below 32 or, `signed`, any int8; `x` in -127..127), as
    i16: `pmaddubsw` on x86 (signed codes through their magnitudes,
    `psignb`), else widened products added in pairs."""
    if x86_madd_instructions():
        if signed:
            codes, x = signs_moved(builder, codes, x)
        words = ir.VectorType(I16, 16)
        function = declare(builder, _MADD[32][0], words, [codes.type, x.type])
        return builder.call(function, [codes, x])
    wide = ir.VectorType(I16, 32)
    widened = builder.sext(codes, wide) if signed else builder.zext(codes, wide)
    products = builder.mul(widened, builder.sext(x, wide))
    return _add_pairs(builder, products, 16)


def _add_pairs(builder, vector, count):
    """Adjacent pairs of `vector` added: `count` lanes."""
    even, odd = (
        builder.shuffle_vector(
            vector,
            vector,
            ir.Constant(ir.VectorType(I32, count), list(range(start, 2 * count, 2))),
        )
        for start in (0, 1)
    )
    return builder.add(even, odd)


def _word_pairs(builder, words):
    """The eight i32 sums of adjacent pairs of 16 i16 (`pmaddwd` by ones)."""
    lanes = ir.VectorType(I32, _LANES)
    if x86_madd_instructions():
        function = declare(builder, _MADD[32][1], lanes, [words.type, words.type])
        return builder.call(function, [words, constant_splat(I16, 16, 1)])
    return _add_pairs(builder, builder.sext(words, ir.VectorType(I32, 16)), _LANES)


def _broadcast_word(builder, address):
    """The four bytes at `address` repeated over 32 bytes."""
    word = builder.load(builder.inttoptr(address, I32.as_pointer()), align=1)
    return builder.bitcast(splat(builder, word, 8), ir.VectorType(I8, 32))


def load_halves(builder, address):
    """Eight halves at `address` as float32."""
    vector = builder.load(
        builder.inttoptr(address, ir.VectorType(ir.HalfType(), _LANES).as_pointer()),
        align=1,
    )
    return builder.fpext(vector, ir.VectorType(F32, _LANES))


def tile_codes(builder, layout, *blocks):
    """The unpacked codes of a tile block: per step, the codes that meet
    the activations at ``4 step`` and, for 4-bit formats, at ``16 + 4
    step`` (32 i8 each, four per row). Given the blocks of two tiles, each
    vector holds the first's 32 codes then the second's (64 i8)."""
    width = 32 * len(blocks)

    def load(offset):
        parts = [
            load_vector(builder, add_offset(builder, block, offset), I8, 32)
            for block in blocks
        ]
        if len(parts) == 1:
            return parts[0]
        return builder.shuffle_vector(
            parts[0],
            parts[1],
            ir.Constant(ir.VectorType(I32, width), list(range(width))),
        )

    codes = []
    if layout.high_bits is not None:
        high = load(layout.tile_high_bits)
    for step in range(layout.steps if layout.signed else 4):
        packed = load(layout.tile_codes + 32 * step)
        if layout.signed:
            codes.append((packed,))
            continue
        low = builder.and_(packed, constant_splat(I8, width, 15))
        top = builder.lshr(packed, constant_splat(I8, width, 4))
        if layout.high_bits is not None:
            bit = constant_splat(I8, width, 16)
            low = builder.or_(
                low,
                builder.and_(
                    builder.shl(high, constant_splat(I8, width, 4 - step)), bit
                ),
            )
            top = builder.or_(
                top,
                builder.and_(builder.lshr(high, constant_splat(I8, width, step)), bit),
            )
        codes.append((low, top))
    return codes


class _RowSums:
    """The eight rows' int32 sums of codes times activation codes, added
    one 32-byte step at a time (four codes of each row against one
    broadcast activation word): with VNNI, one `vpdpbusd` per step, into
    `chains` accumulators taken in turn (so each waits only on its own);
    else 16-bit pair sums (`_pair_products`) added while they cannot
    overflow (`per_flush` of them), then widened (`_word_pairs`)."""

    def __init__(self, builder, signed, per_flush, chains=1):
        self.builder, self.signed, self.per_flush = builder, signed, per_flush
        self.vnni = vnni_instructions()
        self.totals = [None] * (chains if self.vnni else 1)
        self.turn = 0
        self.pending, self.count = None, 0

    def add(self, codes, x):
        builder = self.builder
        if self.vnni:
            if self.signed:
                codes, x = signs_moved(builder, codes, x)
            which = self.turn % len(self.totals)
            self.totals[which] = dot_bytes(builder, self.totals[which], codes, x)
            self.turn += 1
            return
        product = _pair_products(builder, codes, x, self.signed)
        self.pending = (
            product if self.pending is None else builder.add(self.pending, product)
        )
        self.count += 1
        if self.count == self.per_flush:
            self._flush()

    def _flush(self):
        lanes = _word_pairs(self.builder, self.pending)
        first = self.totals[0]
        self.totals[0] = lanes if first is None else self.builder.add(first, lanes)
        self.pending, self.count = None, 0

    def lanes(self):
        """The sums added so far (i32, one lane per row)."""
        if self.pending is not None:
            self._flush()
        totals = [total for total in self.totals if total is not None]
        result = totals[0]
        for total in totals[1:]:
            result = self.builder.add(result, total)
        return result


def _token_sums(builder, layout, codes, x, signed):
    """The eight rows' int32 sums of codes times activation codes (at `x`,
    the block's 32) of one token (16-bit pair sums: 8 steps of 4-bit codes,
    4 of 5-bit, 1 of Q8_0's). `signed`: whether `codes` are signed (Q8_0's
    as stored, not biased by `_TileTerms`)."""
    per_flush = 1 if layout.signed else (8 if layout.high_bits is None else 4)
    sums = _RowSums(builder, signed, per_flush, chains=2)
    for step, step_codes in enumerate(codes):
        starts = (4 * step,) if layout.signed else (4 * step, 16 + 4 * step)
        for values, start in zip(step_codes, starts, strict=True):
            sums.add(values, _broadcast_word(builder, add_offset(builder, x, start)))
    return sums.lanes()


class _TileTerms:
    """IR of one tile block's terms for one token: each ``(values,
    factors)`` pair of float vectors is to be multiplied and added to the
    token's eight running sums."""

    def __init__(self, layout, builder, arguments):
        self.layout, self.builder = layout, builder
        self.tile, _, _, self.x, self.cols, self.scales, self.sums = arguments[:7]
        self.block_sums = arguments[7]
        self.groups = builder.sdiv(self.cols, i64(ACTIVATION_BLOCK))
        # With VNNI, Q8_0's signed codes are biased once per block to the
        # unsigned ``q + 128`` (their top bit flipped), so that every token
        # multiplies them as they are (`vpdpbusd` is unsigned by signed),
        # where moving the signs onto the activations cost two more
        # instructions per token and step; the bias comes off as an offset,
        # ``sum(q x) = sum((q + 128) x) - 128 sum(x)``: the same integers.
        # (Without VNNI the 16-bit pair sums of ``255 * 127`` would
        # saturate.)
        self.biased = layout.signed and vnni_instructions()
        self.offset = SIGNED_BIAS if self.biased else layout.offset
        # Whether the codes `terms` multiplies are signed.
        self.signed = layout.signed and not self.biased

    def block(self, index):
        """Loads and unpacks tile block `index` (kept for `terms`)."""
        builder, layout = self.builder, self.layout
        self.index = index
        self.address = address = builder.add(
            self.tile, builder.mul(index, i64(INTERLEAVED_ROWS * layout.block_bytes))
        )
        self.scale = load_halves(builder, address)
        self.minimum = None
        if layout.minimum is not None:
            self.minimum = load_halves(
                builder, add_offset(builder, address, layout.tile_minimum)
            )
        self.codes = tile_codes(builder, layout, address)
        if self.biased:
            bias = constant_splat(I8, 32, -SIGNED_BIAS)
            self.codes = [(builder.xor(packed, bias),) for (packed,) in self.codes]

    def _super_block(self, token):
        """The first activation group and the codes of `token` that meet
        super-block `self.index` (eight groups of 32)."""
        builder = self.builder
        first_group = builder.add(
            builder.mul(token, self.groups), builder.mul(self.index, i64(8))
        )
        x = builder.add(
            self.x,
            builder.add(
                builder.mul(token, self.cols),
                builder.mul(self.index, i64(8 * ACTIVATION_BLOCK)),
            ),
        )
        return first_group, x

    def _group_scalar(self, base, group, scalar_type, size):
        builder = self.builder
        address = builder.add(base, builder.mul(group, i64(size)))
        return builder.load(
            builder.inttoptr(address, scalar_type.as_pointer()), align=size
        )

    def terms(self, token):
        builder, layout = self.builder, self.layout
        group = builder.add(builder.mul(token, self.groups), self.index)
        x = builder.add(
            self.x,
            builder.add(
                builder.mul(token, self.cols),
                builder.mul(self.index, i64(ACTIVATION_BLOCK)),
            ),
        )
        lanes = _token_sums(builder, layout, self.codes, x, self.signed)
        if self.offset:
            # sum((q - offset) * x) = sum(q * x) - offset * sum(x).
            pair = self._group_scalar(self.sums, group, ir.VectorType(I32, 2), 8)
            code_sum = builder.add(
                builder.extract_element(pair, I32(0)),
                builder.extract_element(pair, I32(1)),
            )
            offset = builder.mul(code_sum, I32(self.offset))
            lanes = builder.sub(lanes, splat(builder, offset, _LANES))
        x_scale = self._group_scalar(self.scales, group, F32, 4)
        result = [
            (
                builder.sitofp(lanes, _FLOATS),
                builder.fmul(self.scale, splat(builder, x_scale, _LANES)),
            )
        ]
        if self.minimum is not None:
            block_sum = self._group_scalar(self.block_sums, group, F32, 4)
            result.append((self.minimum, splat(builder, block_sum, _LANES)))
        return result


class _K4TileTerms(_TileTerms):
    """`_TileTerms` of a Q4_K tile block: per group of 32 values, the codes'
    term ``d * scale_j * x_scale_j * sum(q * x)`` and the mins' term
    ``-dmin * min_j * block_sum_j``, eight rows at a time."""

    def block(self, index):
        builder = self.builder
        self.index = index
        self.address = builder.add(
            self.tile,
            builder.mul(index, i64(INTERLEAVED_ROWS * K4TileLayout.block_bytes)),
        )
        d = load_halves(builder, self.address)
        dmin = load_halves(
            builder, add_offset(builder, self.address, K4TileLayout.tile_minimum)
        )
        self.factors = []
        for j in range(8):
            at = add_offset(
                builder, self.address, K4TileLayout.tile_scales + K4_SCALES * j
            )
            scale = builder.sitofp(_six_bit_rows(builder, at), _FLOATS)
            minimum = builder.sitofp(
                _six_bit_rows(builder, add_offset(builder, at, 6)), _FLOATS
            )
            self.factors.append((builder.fmul(d, scale), builder.fmul(dmin, minimum)))

    def terms(self, token):
        builder = self.builder
        first_group, x = self._super_block(token)
        codes_at = add_offset(builder, self.address, K4TileLayout.tile_codes)
        result = []
        for pair in range(4):
            # Eight steps of 4-bit codes stay within 16 bits.
            low_sums = _RowSums(builder, False, per_flush=8)
            high_sums = _RowSums(builder, False, per_flush=8)
            for step in range(8):
                packed = load_vector(
                    builder,
                    add_offset(builder, codes_at, 256 * pair + 32 * step),
                    I8,
                    32,
                )
                at = 64 * pair + 4 * step
                low_sums.add(
                    builder.and_(packed, constant_splat(I8, 32, 15)),
                    _broadcast_word(builder, add_offset(builder, x, at)),
                )
                high_sums.add(
                    builder.lshr(packed, constant_splat(I8, 32, 4)),
                    _broadcast_word(builder, add_offset(builder, x, at + 32)),
                )
            for j, sums in ((2 * pair, low_sums), (2 * pair + 1, high_sums)):
                group = builder.add(first_group, i64(j))
                x_scale = self._group_scalar(self.scales, group, F32, 4)
                block_sum = self._group_scalar(self.block_sums, group, F32, 4)
                scale, minimum = self.factors[j]
                lanes = builder.sitofp(sums.lanes(), _FLOATS)
                result.append(
                    (lanes, builder.fmul(scale, splat(builder, x_scale, _LANES)))
                )
                result.append(
                    (minimum, splat(builder, builder.fneg(block_sum), _LANES))
                )
        return result


class _K6TileTerms(_TileTerms):
    """`_TileTerms` of a Q6_K tile block: per 16 values ``t``, ``d *
    scale_t * x_scale * (sum(q * x) - 32 sum(x))``, eight rows at a time."""

    def block(self, index):
        builder = self.builder
        self.index = index
        self.address = builder.add(
            self.tile,
            builder.mul(index, i64(INTERLEAVED_ROWS * K6TileLayout.block_bytes)),
        )
        self.scale = load_halves(builder, self.address)

    def _row_scales(self, t):
        builder = self.builder
        at = add_offset(builder, self.address, K6TileLayout.tile_scales + 8 * t)
        scales = load_vector(builder, at, I8, _LANES)
        return builder.sitofp(scales, _FLOATS)

    def terms(self, token):
        builder = self.builder
        first_group, x = self._super_block(token)
        codes_at = add_offset(builder, self.address, K6TileLayout.tile_codes)
        mask = constant_splat(I8, 32, 15)
        top = constant_splat(I8, 32, 0x30)
        result = []
        for h in range(2):
            # Per value group k (32 values) and half: the 32-bit sums (6-bit
            # codes: two steps at most in 16 bits).
            sums = {
                (k, half): _RowSums(builder, False, per_flush=2)
                for k in range(4)
                for half in range(2)
            }
            for step in range(8):
                at = add_offset(builder, codes_at, 96 * (8 * h + step))
                first, second, bits = (
                    load_vector(builder, add_offset(builder, at, 32 * part), I8, 32)
                    for part in range(3)
                )
                codes = (
                    builder.or_(
                        builder.and_(first, mask),
                        builder.and_(builder.shl(bits, constant_splat(I8, 32, 4)), top),
                    ),
                    builder.or_(
                        builder.and_(second, mask),
                        builder.and_(builder.shl(bits, constant_splat(I8, 32, 2)), top),
                    ),
                    builder.or_(
                        builder.lshr(first, constant_splat(I8, 32, 4)),
                        builder.and_(bits, top),
                    ),
                    builder.or_(
                        builder.lshr(second, constant_splat(I8, 32, 4)),
                        builder.and_(
                            builder.lshr(bits, constant_splat(I8, 32, 2)), top
                        ),
                    ),
                )
                half = step // 4
                for k, values in enumerate(codes):
                    start = 128 * h + 32 * k + 4 * step
                    sums[(k, half)].add(
                        values, _broadcast_word(builder, add_offset(builder, x, start))
                    )
            for k in range(4):
                group = builder.add(first_group, i64(4 * h + k))
                x_scale = self._group_scalar(self.scales, group, F32, 4)
                common = builder.fmul(self.scale, splat(builder, x_scale, _LANES))
                pair = self._group_scalar(self.sums, group, ir.VectorType(I32, 2), 8)
                for half in range(2):
                    code_sum = builder.extract_element(pair, I32(half))
                    offset = builder.mul(code_sum, I32(32))
                    lanes = builder.sub(
                        sums[(k, half)].lanes(), splat(builder, offset, _LANES)
                    )
                    factor = builder.fmul(
                        common, self._row_scales(8 * h + 2 * k + half)
                    )
                    result.append((builder.sitofp(lanes, _FLOATS), factor))
        return result


def _six_bit_rows(builder, address):
    """Eight rows' 6-bit values (`_rows_packed`) at `address` as i32."""
    word = builder.load(builder.inttoptr(address, I32.as_pointer()), align=1)
    tops = builder.load(
        builder.inttoptr(add_offset(builder, address, 4), I16.as_pointer()), align=1
    )
    lanes = ir.VectorType(I32, _LANES)
    nibbles = builder.lshr(
        splat(builder, word, _LANES), ir.Constant(lanes, [4 * r for r in range(8)])
    )
    high = builder.lshr(
        splat(builder, builder.zext(tops, I32), _LANES),
        ir.Constant(lanes, [2 * r for r in range(8)]),
    )
    return builder.or_(
        builder.and_(nibbles, constant_splat(I32, _LANES, 15)),
        builder.shl(
            builder.and_(high, constant_splat(I32, _LANES, 3)),
            constant_splat(I32, _LANES, 4),
        ),
    )


_FLOATS = ir.VectorType(F32, _LANES)


def _fmuladd(builder):
    return declare(builder, f"llvm.fmuladd.v{_LANES}f32", _FLOATS, [_FLOATS] * 3)


# How far ahead of the tile block it unpacks the several-token loop asks for
# the weight's bytes (a chunk's tiles lie end to end, so this reaches into
# the next tiles). With several tokens a block's byte products take about
# as long as reading it from memory, and without the hint the two did not
# overlap: the hardware prefetcher starts afresh at every 4 KiB page. The
# one-token loop is bound by the reads alone and the hardware keeps up; the
# hints only cost it instructions there (measured on SmolLM2's q4 weights,
# 121 products: 8 tokens 6.4 -> 5.4 ms at 2 threads, 11.5 -> 9.6 ms at 1;
# 1 token 2.6-2.8 -> 2.7-3.0 ms with the hint, so it has none).
PREFETCH_DISTANCE = 4096


def _prefetch_ahead(builder, terms):
    """Hints the tile block `PREFETCH_DISTANCE` bytes past the one
    `terms.block` just loaded into the caches."""
    size = INTERLEAVED_ROWS * terms.layout.block_bytes
    prefetch_lines(builder, add_offset(builder, terms.address, PREFETCH_DISTANCE), size)


def _one_token(builder, terms, blocks, acc):
    """The loop for one token: the running sums stay in registers (one per
    term, so each multiply-add waits only on its own), added to `acc` at
    the end."""
    fmuladd = _fmuladd(builder)
    zero = ir.Constant(_FLOATS, [0.0] * _LANES)

    def block(index, running):
        terms.block(index)
        running = list(running)
        for number, (values, factors) in enumerate(terms.terms(i64(0))):
            which = number % 2
            running[which] = builder.call(fmuladd, [values, factors, running[which]])
        return running

    running = carried_loop(builder, blocks, "tile_one", [zero, zero], block)
    total = builder.fadd(running[0], running[1])
    pointer = builder.inttoptr(acc, _FLOATS.as_pointer())
    builder.store(builder.fadd(builder.load(pointer, align=4), total), pointer, align=4)


def _several_tokens(builder, terms, blocks, tokens, acc):
    """The loop for several tokens: each block is unpacked once, then every
    token's terms are added to its running sums in `acc`."""
    fmuladd = _fmuladd(builder)

    def token_terms(token, _):
        pointer = builder.inttoptr(
            builder.add(acc, builder.mul(token, i64(4 * _LANES))),
            _FLOATS.as_pointer(),
        )
        running = builder.load(pointer, align=4)
        for values, factors in terms.terms(token):
            running = builder.call(fmuladd, [values, factors, running])
        builder.store(running, pointer, align=4)
        return []

    def block(index, _):
        terms.block(index)
        _prefetch_ahead(builder, terms)
        carried_loop(builder, tokens, "tile_tokens", [], token_terms)
        return []

    carried_loop(builder, blocks, "tile_blocks", [], block)


def _tile_dot(quant_type):
    layout = TILE_LAYOUTS[quant_type]

    @intrinsic
    def tile_dot(
        typingctx, tile, blocks, tokens, x, cols, scales, sums, block_sums, acc
    ):
        """Adds to `acc` (float32, eight per token) the eight rows' dot
        products of the tile at `tile` (`blocks` tile blocks) with each
        token's activation codes (`x`, `cols` per token) and groups
        (`scales`, `sums`, `block_sums`: `quantize_activations`' scratch,
        ``cols / 32`` groups per token)."""
        arguments = (tile, blocks, tokens, x, cols, scales, sums, block_sums, acc)
        if not integers(*arguments):
            return None

        def codegen(context, builder, signature, args):
            values = [
                context.cast(builder, value, value_type, types.int64)
                for value, value_type in zip(args, signature.args, strict=True)
            ]
            blocks, tokens, acc = values[1], values[2], values[8]
            kind = {Q4_K: _K4TileTerms, Q6_K: _K6TileTerms}.get(quant_type, _TileTerms)
            terms = kind(layout, builder, values)
            one = builder.append_basic_block("tile_one_token")
            several = builder.append_basic_block("tile_several_tokens")
            done = builder.append_basic_block("tile_done")
            check = builder.append_basic_block("tile_check_tokens")
            builder.cbranch(builder.icmp_signed(">", blocks, i64(0)), check, done)
            builder.position_at_end(check)
            choice = builder.icmp_signed("==", tokens, i64(1))
            many = builder.append_basic_block("tile_any_tokens")
            builder.cbranch(choice, one, many)
            builder.position_at_end(many)
            builder.cbranch(builder.icmp_signed(">", tokens, i64(1)), several, done)
            builder.position_at_end(one)
            _one_token(builder, terms, blocks, acc)
            builder.branch(done)
            builder.position_at_end(several)
            _several_tokens(builder, terms, blocks, tokens, acc)
            builder.branch(done)
            builder.position_at_end(done)
            return i64(0)

        return types.int64(*arguments), codegen

    return tile_dot


TILE_DOT = {quant_type: _tile_dot(quant_type) for quant_type in TILE_LAYOUTS}


@helper
def clear_sums(acc, start, count):
    """``acc[start:start + count] = 0``."""
    # Through a slice: indices from 0 need no negative-index check, so the
    # loop becomes vector stores (the scalar loops, this one and
    # `store_sums`', cost a fifth of an eight-token product).
    sums = acc[start : start + count]
    for j in range(count):
        sums[j] = 0


@helper
def store_sums(store, out, out_stride, first, rows, tokens, acc, start, width):
    """Each token's `width` running sums in `acc` (from `start`, `width`
    per token) into `out` from row `first`, up to row `rows`."""
    count = min(width, rows - first)
    for token in range(tokens):
        # Slices, as in `clear_sums`: a whole tile's sums are copied as
        # vectors.
        at = start + token * width
        row = token * out_stride + first
        sums = acc[at : at + count]
        target = out[row : row + count]
        for j in range(count):
            store(target, j, sums[j])


@cache
def interleaved_product_kernel(quant_type: int, dtype: str, parallel: bool):
    """``run(weight, x, x_stride, out, out_stride, tokens, rows, cols, codes,
    scales, block_sums, sums, acc, chunks)``: ``out[t, r]`` for the first
    `rows` rows of the interleaved weight at `weight` (addresses; strides
    in elements), the tiles split into `chunks` parallel chunks. `codes`,
    `scales`, `block_sums` and `sums` are the quantised activations'
    scratch (as `ggml.product_kernel`'s), `acc` float32 scratch of ``chunks
    * tokens * 8``."""
    tile_dot = TILE_DOT[quant_type]
    storage = STORAGE[dtype]
    load = loader(dtype)
    store = storer(dtype)
    tile_rows = INTERLEAVED_ROWS
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
        chunks,
    ):
        x = element_array(x_address, (tokens - 1) * x_stride + cols, storage)
        out = element_array(out_address, (tokens - 1) * out_stride + rows, storage)
        acc = element_array(acc_address, chunks * tokens * tile_rows, np.float32)
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
        for chunk in prange(chunks):
            first_sum = chunk * tokens * tile_rows
            sums_at = acc_address + 4 * first_sum
            for tile in range(chunk * tiles // chunks, (chunk + 1) * tiles // chunks):
                clear_sums(acc, first_sum, tokens * tile_rows)
                tile_dot(
                    weight + tile * tile_bytes,
                    blocks,
                    tokens,
                    codes_address,
                    cols,
                    scales_address,
                    sums_address,
                    block_sums_address,
                    sums_at,
                )
                first = tile * tile_rows
                store_sums(
                    store, out, out_stride, first, rows, tokens, acc, first_sum,
                    tile_rows,
                )  # fmt: skip
        return 0

    return kernel(run, parallel=parallel)


class InterleavedProductPlan(ProductPlan):
    """`ProductPlan` of an interleaved product (below
    `INTERLEAVED_TILED_MIN_TOKENS` tokens without VNNI, of any number with
    it): the tile kernel, with a float32 scratch of eight running sums per
    token and chunk."""

    kernel = staticmethod(interleaved_product_kernel)
    tile_rows = INTERLEAVED_ROWS

    def kernel_scratch(self, tokens: int, chunks: int) -> tuple:
        self.acc = np.zeros(max(1, chunks * tokens * INTERLEAVED_ROWS), np.float32)
        return (self.acc.ctypes.data,)

    def arguments(self, weight, x, out) -> tuple:
        # Tiles are whole runs of bytes: no row stride.
        return (
            weight.data_ptr(),
            x.data_ptr(),
            self.x_stride,
            out.data_ptr(),
            self.out_stride,
            *self.tail,
        )


class InterleavedTiledPlan(TiledProductPlan):
    """`TiledProductPlan` over an interleaved weight: each panel (whole
    tiles) is put back into the file's layout (`deinterleave`) in a byte
    scratch, then dequantised from there."""

    panel_multiple = INTERLEAVED_ROWS

    def __init__(self, quant_type: int, weight, x, out, rows: int) -> None:
        super().__init__(quant_type, weight, x, out, rows)
        self.quant_type = quant_type
        self.row_bytes = row_bytes(quant_type, self.cols)
        self.file_rows = np.zeros((self.panel_rows, self.row_bytes), np.uint8)

    def panel_source(self, weight_address: int, first: int, count: int):
        n = INTERLEAVED_ROWS
        whole = -(-count // n) * n
        tiles = byte_rows(
            weight_address + first * self.row_bytes, whole, self.row_bytes
        )
        target = self.file_rows[:whole]
        deinterleave(tiles, self.quant_type, target)
        return target.ctypes.data, self.row_bytes


def byte_rows(address: int, rows: int, width: int) -> np.ndarray:
    """The ``(rows, width)`` bytes at `address` as a NumPy array."""
    memory = (ctypes.c_uint8 * (rows * width)).from_address(address)
    return np.ctypeslib.as_array(memory).reshape(rows, width)


# Tokens from which an interleaved product takes the tiled BLAS path, on a
# CPU without byte dot products (VNNI); with them, never. Measured at 2
# threads on SmolLM2's Q4_1 shapes (AMD EPYC with AVX-512): compiled with
# VNNI, the tile kernel takes 0.05 to 0.4 of the tiled path's time from 16
# to 512 tokens (0.4 to 0.65 for Q4_0, Q4_K, Q6_K, Q8_0 at 512); compiled
# for AVX2 (`NUMBA_CPU_NAME=haswell`), 0.57 to 0.61 at 32 tokens, 0.82 to
# 1.0 at 64 and 1.18 to 1.19 at 128.
INTERLEAVED_TILED_MIN_TOKENS = 128


def tiled_from(tokens: int) -> bool:
    """Whether an interleaved product of `tokens` tokens takes the tiled
    BLAS path (`INTERLEAVED_TILED_MIN_TOKENS`)."""
    return not vnni_instructions() and tokens >= INTERLEAVED_TILED_MIN_TOKENS


def interleaved_plan(quant_type: int, weight, x, out, rows: int):
    """`InterleavedTiledPlan` where `tiled_from` says so, else
    `ggml_amx.AmxProductPlan` where AMX tiles apply, else
    `InterleavedProductPlan` (the same product)."""
    # Imported here: `ggml_amx` builds on this module.
    from .ggml_amx import AmxProductPlan, amx_applies

    tokens = x.shape[0]
    if tiled_from(tokens):
        kind = InterleavedTiledPlan
    elif amx_applies(quant_type, tokens, rows):
        kind = AmxProductPlan
    else:
        kind = InterleavedProductPlan
    return kind(quant_type, weight, x, out, rows)
