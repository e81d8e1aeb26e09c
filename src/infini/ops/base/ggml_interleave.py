"""`ggml_interleave`: GGML blocks rearranged eight rows side by side, the
layout `ggml_mul_mat_interleaved_a8` reads."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._ggml import GGML_TYPES, INTERLEAVED_ROWS, INTERLEAVED_TYPES, check_quant_type


def check_interleaved_type(operator, quant_type: int):
    """The geometry of `quant_type`, which must have an interleaved layout."""
    entry = check_quant_type(operator, quant_type)
    if quant_type not in INTERLEAVED_TYPES:
        names = ", ".join(
            f"{GGML_TYPES[code].name}={code}" for code in INTERLEAVED_TYPES
        )
        raise operator.error(
            f"`quant_type`: {entry.name} ({quant_type}) has no interleaved layout; "
            f"it has: {names}."
        )
    return entry


def check_tiles(operator, name: str, meta, entry) -> None:
    """`meta` is a uint8 ``(rows, bytes per row)`` tensor of `entry` blocks
    whose rows fill tiles of `INTERLEAVED_ROWS` and follow each other in
    memory (a tile is read as one run of bytes)."""
    operator.require_dtype(name, meta, ("uint8",))
    operator.require_ndim(name, meta, (2,))
    rows, width = meta.shape
    if width == 0 or width % entry.block_bytes:
        raise operator.error(
            f"`{name}` must hold whole {entry.name} blocks of {entry.block_bytes} "
            f"bytes in each row, got shape {meta.shape}."
        )
    if rows % INTERLEAVED_ROWS:
        raise operator.error(
            f"`{name}` must have a multiple of {INTERLEAVED_ROWS} rows (the rows of "
            f"a tile), got {rows}."
        )
    if rows > 1 and (meta.strides[1] != 1 or meta.strides[0] != width):
        raise operator.error(
            f"`{name}` must be contiguous (strides ({width}, 1)), got strides "
            f"{meta.strides}."
        )


class GgmlInterleave(Operator):
    """``out = interleave(weight)``: the GGML blocks of `weight` (type
    `quant_type`, the file's layout described in `infini.ops.base._ggml`)
    rearranged into tiles of eight rows, the layout that
    `ggml_mul_mat_interleaved_a8` reads. An extension of this library (no
    catalog or vLLM entry): a weight is prepared once, when it is loaded.

    - `weight` and `out` are contiguous uint8 ``(rows, cols / block_elements
      * block_bytes)`` with `rows` a multiple of 8; `quant_type` is Q4_0=2,
      Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8 (32-value blocks), Q4_K=12 or Q6_K=14.
      `out` may be `weight` itself.
    - The bytes are the same in number. Tile ``t`` (rows ``8t`` to
      ``8t + 7``, ``8 * row_bytes`` bytes from byte ``8t * row_bytes``) holds
      one tile block per block column ``b``, in order, each ``8 *
      block_bytes`` bytes: the eight rows' scales ``d`` (16 bytes, row
      after row), their minimums ``m`` (Q4_1, Q5_1: 16 bytes), their high
      bits (Q5_0, Q5_1: 8 words of 32 bits, see below), then their codes in
      steps of four bytes: step ``s`` is 32 bytes, bytes ``4s`` to ``4s + 3``
      of each row's code bytes, row after row (4 steps for the 16 bytes of
      nibbles, 8 for Q8_0's 32 codes).
    - High bits: bit ``b`` of byte ``i`` of a row's word is the high bit of
      value ``4b + i`` for ``b < 4``, of value ``16 + 4 (b - 4) + i``
      otherwise (bit ``j`` of the file's word is the high bit of value
      ``j``), so that the bits one step needs are one shift away.
    - Q4_K (1,152 bytes per tile block): the eight ``d`` (16 bytes), the
      eight ``dmin`` (16); per group ``j`` of 32 values (8 of them), 12
      bytes: the eight rows' 6-bit scales as a little-endian 32-bit word of
      their low four bits (row ``r`` at bits ``4r``) and a 16-bit word of
      their top two bits (row ``r`` at bits ``2r``), then the eight mins
      the same way; then the codes: per pair ``i`` of groups (``2i`` in
      the low nibbles, ``2i + 1`` in the high ones of the same 32 bytes of
      each row), 8 steps of 32 bytes, bytes ``32i + 4s`` to ``32i + 4s + 3``
      of each row's 128 code bytes, row after row.
    - Q6_K (1,680 bytes): the eight ``d`` (16 bytes); per 16 values ``t``
      the eight rows' int8 scales (8 bytes each); then per half ``h`` of the
      super-block and step ``s`` (8 per half), three runs of 32 bytes, row
      after row: bytes ``64h + 4s`` to ``64h + 4s + 3`` of each row's 128
      bytes of low nibbles, bytes ``64h + 32 + 4s`` onwards, and bytes
      ``32h + 4s`` onwards of its 64 bytes of high bits.
    """

    name = "ggml_interleave"
    trace_name = "GgmlInterleave"
    overloads = ("weight: Tensor, quant_type: int, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.type = check_interleaved_type(self, args.quant_type)
        check_tiles(self, "weight", args.weight, self.type)
        self.require_shape("out", args.out, args.weight.shape, "the shape of `weight`")
        check_tiles(self, "out", args.out, self.type)
        self.require_writable("out", args.out)
