"""GGML block quantisation (the weight formats of GGUF files), shared by the
`ggml_*` bases and importable by callers such as the model runner.

A quantised matrix of ``rows x cols`` values is stored as a uint8 tensor of
shape ``(rows, row_bytes(quant_type, cols))``: each row holds
``cols / block_elements`` blocks, each block `block_bytes` bytes encoding
`block_elements` consecutive values of the row. The layouts (llama.cpp's
`ggml` library; `gguf.constants.GGML_QUANT_SIZES` lists the sizes), with
16-bit scales stored as IEEE half precision, little-endian:

- Q4_0 (32 values, 18 bytes): scale ``d``, 16 bytes of 4-bit codes; value
  ``j < 16`` is the low nibble of byte ``j``, value ``j + 16`` its high
  nibble: ``d * (q - 8)``.
- Q4_1 (32, 20): ``d``, minimum ``m``, 16 bytes as Q4_0: ``d * q + m``.
- Q5_0 (32, 22): ``d``, 32 high bits (bit ``j`` of a little-endian uint32 is
  bit 4 of value ``j``), 16 bytes of low nibbles as Q4_0: ``d * (q - 16)``.
- Q5_1 (32, 24): ``d``, ``m``, the high bits and nibbles as Q5_0:
  ``d * q + m``.
- Q8_0 (32, 34): ``d``, 32 int8 codes: ``d * q``.
- Q2_K (256, 84): 16 bytes of 4-bit scale (low) and min (high) per 16
  values, 64 bytes of 2-bit codes, ``d``, ``dmin``. Value ``128 h + 32 k + l``
  (``h < 2``, ``k < 4``, ``l < 32``) is bits ``2k..2k+1`` of code byte
  ``32 h + l``: ``d * scale * q - dmin * min`` with the scale and min of
  its group of 16.
- Q3_K (256, 110): 32 bytes of high bits, 64 bytes of 2-bit codes as Q2_K,
  12 bytes of 6-bit scales, ``d``. Value ``32 k + l`` takes bit ``k`` of high
  byte ``l`` as bit 2 of its code: ``d * (scale - 32) * (q - 4)``. Scale ``i``
  has its low four bits in byte ``i`` (low nibble, ``i < 8``) or ``i - 8``
  (high nibble) and its top two in bits ``2 (i // 4)`` of byte ``8 + i % 4``.
- Q4_K (256, 144): ``d``, ``dmin``, 12 bytes of 6-bit scales and mins (one
  pair per 32 values), 128 bytes of 4-bit codes. Group ``j`` of 32 values is
  the low (even ``j``) or high (odd ``j``) nibbles of bytes ``32 (j // 2)``
  onwards: ``d * scale * q - dmin * min``. For ``j < 4`` the scale is the low
  six bits of byte ``j`` and the min those of byte ``j + 4``; for ``j >= 4``
  the scale is the low nibble of byte ``j + 4`` plus the top two bits of
  byte ``j - 4`` as bits 4-5, the min the high nibble of byte ``j + 4`` plus
  the top two bits of byte ``j``.
- Q5_K (256, 176): ``d``, ``dmin``, scales as Q4_K, 32 bytes of high bits
  (bit ``j`` of byte ``l`` is bit 4 of value ``l`` of group ``j``), 128 bytes
  of nibbles as Q4_K.
- Q6_K (256, 210): 128 bytes of low nibbles, 64 bytes of 2-bit high parts,
  16 int8 scales (one per 16 values), ``d``. Value ``128 h + 32 k + l`` takes
  the low (``k < 2``) or high nibble of byte ``64 h + 32 (k % 2) + l`` and
  bits ``2k..2k+1`` of high byte ``32 h + l`` as bits 4-5:
  ``d * scale * (q - 32)``.
"""

from __future__ import annotations

from typing import NamedTuple


class GgmlType(NamedTuple):
    """A GGML quantisation type: its code, name and block geometry."""

    code: int
    name: str
    block_elements: int
    block_bytes: int


# Every quantised GGML type code with its geometry; the `ggml_*` operators
# implement `SUPPORTED_TYPES`, the others are named in error messages.
GGML_TYPES = {
    entry.code: entry
    for entry in (
        GgmlType(2, "Q4_0", 32, 18),
        GgmlType(3, "Q4_1", 32, 20),
        GgmlType(6, "Q5_0", 32, 22),
        GgmlType(7, "Q5_1", 32, 24),
        GgmlType(8, "Q8_0", 32, 34),
        GgmlType(9, "Q8_1", 32, 40),
        GgmlType(10, "Q2_K", 256, 84),
        GgmlType(11, "Q3_K", 256, 110),
        GgmlType(12, "Q4_K", 256, 144),
        GgmlType(13, "Q5_K", 256, 176),
        GgmlType(14, "Q6_K", 256, 210),
        GgmlType(15, "Q8_K", 256, 292),
        GgmlType(16, "IQ2_XXS", 256, 66),
        GgmlType(17, "IQ2_XS", 256, 74),
        GgmlType(18, "IQ3_XXS", 256, 98),
        GgmlType(19, "IQ1_S", 256, 50),
        GgmlType(20, "IQ4_NL", 32, 18),
        GgmlType(21, "IQ3_S", 256, 110),
        GgmlType(22, "IQ2_S", 256, 82),
        GgmlType(23, "IQ4_XS", 256, 136),
        GgmlType(29, "IQ1_M", 256, 56),
    )
}

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 2, 3, 6, 7, 8
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 10, 11, 12, 13, 14

SUPPORTED_TYPES = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)

# The interleaved layout (`ggml_interleave`, read by
# `ggml_mul_mat_interleaved_a8`): the types whose blocks it rearranges, and
# the rows side by side in one tile.
INTERLEAVED_TYPES = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K)
INTERLEAVED_ROWS = 8

# Activations of the `_a8` products are quantised in blocks of this many
# values (every supported type's block or sub-block is a multiple of it).
ACTIVATION_BLOCK = 32

FLOAT_DTYPES = ("float32", "float16", "bfloat16")


def type_name(quant_type: int) -> str:
    entry = GGML_TYPES.get(quant_type)
    return entry.name if entry else "unknown"


def supported_type(quant_type: int) -> GgmlType:
    """The geometry of `quant_type`; ValueError (from the caller's
    `operator.error`) when it is not implemented."""
    if quant_type not in SUPPORTED_TYPES:
        names = ", ".join(f"{GGML_TYPES[code].name}={code}" for code in SUPPORTED_TYPES)
        raise ValueError(
            f"quant_type {quant_type} ({type_name(quant_type)}) is not supported; "
            f"supported: {names}."
        )
    return GGML_TYPES[quant_type]


def row_bytes(quant_type: int, cols: int) -> int:
    """Bytes of one quantised row of `cols` values (a multiple of the
    type's block)."""
    entry = GGML_TYPES[quant_type]
    return cols // entry.block_elements * entry.block_bytes


def check_quant_type(operator, quant_type: int) -> GgmlType:
    try:
        return supported_type(quant_type)
    except ValueError as error:
        raise operator.error(f"`quant_type`: {error}") from None


def check_cols(operator, entry: GgmlType, what: str, cols: int) -> None:
    """`what` (the columns, named for the message) is a positive multiple of
    the type's block."""
    if cols <= 0 or cols % entry.block_elements:
        raise operator.error(
            f"{what} must be a positive multiple of the {entry.name} block of "
            f"{entry.block_elements} values, got {cols}."
        )


def check_weight(
    operator, weight, entry: GgmlType, cols: int, rows: int, rows_name: str
) -> None:
    """`weight` is a uint8 ``(rows_w, bytes per row)`` tensor of `entry`
    blocks holding `cols` values per row, with ``rows_w >= rows`` (the
    parameter `rows_name`) and each row's bytes adjacent."""
    operator.require_dtype("weight", weight, ("uint8",))
    operator.require_ndim("weight", weight, (2,))
    expected = cols // entry.block_elements * entry.block_bytes
    if weight.shape[1] != expected:
        raise operator.error(
            f"`weight` must hold {expected} bytes per row ({cols} values in "
            f"{entry.name} blocks of {entry.block_elements} values, "
            f"{entry.block_bytes} bytes each), got shape {weight.shape}."
        )
    if weight.shape[1] > 1 and weight.strides[1] != 1:
        raise operator.error(
            f"`weight` must have adjacent bytes within each row (stride 1), "
            f"got strides {weight.strides}."
        )
    if rows < 0 or rows > weight.shape[0]:
        raise operator.error(
            f"`{rows_name}` must be between 0 and the {weight.shape[0]} rows of "
            f"`weight`, got {rows}."
        )


def check_quantised_product(operator, args) -> tuple[GgmlType, int, int]:
    """The checks of ``op(weight, x, quant_type, row, out)``: returns the
    type, the tokens and the columns."""
    weight, x, out = args.weight, args.x, args.out
    entry = check_quant_type(operator, args.quant_type)
    operator.require_dtype("x", x, FLOAT_DTYPES)
    operator.require_ndim("x", x, (2,))
    tokens, cols = x.shape
    check_cols(operator, entry, "The columns of `x`", cols)
    check_weight(operator, weight, entry, cols, args.row, "row")
    operator.require_same_dtype("x", {"x": x, "out": out})
    operator.require_shape("out", out, (tokens, args.row), "(tokens, row)")
    for name, meta in (("x", x), ("out", out)):
        if meta.shape[1] > 1 and meta.strides[1] != 1:
            raise operator.error(
                f"`{name}` must have adjacent elements within each row (stride 1), "
                f"got strides {meta.strides}."
            )
    operator.require_writable("out", out)
    return entry, tokens, cols
