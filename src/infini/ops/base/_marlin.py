"""The Marlin weight layout (vLLM's GPTQ/AWQ kernels for GPUs), shared by
`gptq_marlin_repack`, `awq_marlin_repack` and `moe_wna16_marlin_gemm`.

Facts from vLLM's documentation of the layout (`marlin_utils.py`,
`marlin_utils_test.py` and the repack kernels); the tables below are built
from those index formulas.

A quantised ``(size_k, size_n)`` matrix of `num_bits`-bit codes (4 or 8) is
stored as int32 ``(size_k / 16, size_n * 16 / pack)``, ``pack = 32 /
num_bits``, read as one flat run of codes: code ``E`` is bits ``[num_bits *
(E % pack), num_bits * (E % pack + 1))`` of int32 ``E // pack``. The run is cut
into chunks of 1024 codes, each the codes of one block of the matrix:

- the standard layout (16-bit activations): blocks of 16 rows by 64 columns,
  row-block major: chunk ``c`` of row block ``kb`` (``E = kb * 16 * size_n +
  c * 1024 + p``) is rows ``16 kb ...``, columns ``64 c ...``;
- the 8-bit-activation layout (`is_a_8bit`): blocks of 32 rows by 32
  columns, ``E = kb * 32 * size_n + c * 1024 + p``.

Inside a chunk, code ``p`` is the block's element at `chunk_source(p)`.
"""

from __future__ import annotations

from functools import cache

# Rows of a Marlin tile, and the column multiple every Marlin kernel needs.
TILE = 16
TILE_N = 64
CHUNK = 1024
SUPPORTED_BITS = (4, 8)

# The order in which a packed int32 holds its codes, per (bits, is_a_8bit):
# position `i` of a group holds the group's `INTERLEAVE[...][i]`-th code (the
# dequantisation instructions expect it).
INTERLEAVE = {
    (4, False): (0, 2, 4, 6, 1, 3, 5, 7),
    (8, False): (0, 2, 1, 3),
    (4, True): (0, 4, 1, 5, 2, 6, 3, 7),
    (8, True): (0, 1, 2, 3),
}

# AWQ packs along columns: bits ``[num_bits * i, ...)`` of int32 ``j`` of a
# row hold column ``pack * j + AWQ_ORDER[num_bits][i]``.
AWQ_ORDER = {4: (0, 2, 4, 6, 1, 3, 5, 7), 8: (0, 2, 1, 3)}


def pack_factor(num_bits: int) -> int:
    return 32 // num_bits


def block_shape(is_a_8bit: bool) -> tuple[int, int]:
    """(rows, columns) of the matrix block one chunk of 1024 codes holds."""
    return (32, 32) if is_a_8bit else (16, 64)


@cache
def chunk_source(num_bits: int, is_a_8bit: bool) -> tuple[tuple[int, int], ...]:
    """For each code ``p`` of a chunk, the (row, column) inside the chunk's
    block that it holds (1024 pairs)."""
    interleave = INTERLEAVE[(num_bits, is_a_8bit)]
    group = len(interleave)
    sources = []
    for p in range(CHUNK):
        # `u` is the position before the per-int32 interleave.
        u = (p // group) * group + interleave[p % group]
        lane = u // 32
        if is_a_8bit:
            # Lane `lane` reads rows 4 (lane % 4) + {0, 1, 2, 3, 16, ..., 19}
            # of column `lane // 4` of both 8-column halves of two 16-column
            # tiles.
            tile, step = (u // 16) % 2, u % 16
            half, index = step // 8, step % 8
            row = 4 * (lane % 4) + index % 4 + 16 * (index // 4)
        else:
            # Lane `lane` reads rows 2 (lane % 4) + {0, 1, 8, 9} of column
            # `lane // 4` of both halves of four 16-column tiles.
            tile, step = (u // 8) % 4, u % 8
            half, index = step // 4, step % 4
            row = 2 * (lane % 4) + index % 2 + 8 * (index // 2)
        column = 16 * tile + lane // 4 + 8 * half
        sources.append((row, column))
    return tuple(sources)


# Scale and zero-point columns are permuted in runs of 64 (grouped scales,
# zero points) or 32 (one scale per column: "channelwise"; biases): stored
# position ``q`` of a run holds the run's column ``SCALE_PERM[q]``.
SCALE_PERM = tuple(i + 8 * j for i in range(8) for j in range(8))
SCALE_PERM_SINGLE = tuple(
    2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)
)


def stored_position(column: int, permutation: tuple[int, ...]) -> int:
    """Where logical `column` is stored in a row permuted in runs of
    ``len(permutation)``."""
    run = len(permutation)
    return (column // run) * run + permutation.index(column % run)


def zero_point_position(column: int, num_bits: int) -> int:
    """Where logical `column` of a Marlin zero-point row is: the row is
    permuted like grouped scales, then interleaved in groups of
    ``len(INTERLEAVE)`` like the weights, then packed ``pack`` codes per
    int32 in order (code ``s`` at bits ``num_bits * (s % pack)`` of int32
    ``s // pack``)."""
    permuted = stored_position(column, SCALE_PERM)
    interleave = INTERLEAVE[(num_bits, False)]
    group = len(interleave)
    return (permuted // group) * group + interleave.index(permuted % group)


# vLLM's `ScalarType.id`: the type's fields packed into an integer, lowest
# bits first: exponent (8 bits), mantissa (8), signed (1), bias (32),
# finite values only (1), NaN representation (8; vLLM's default, IEEE 754,
# is 1, and integer types keep it).
def scalar_type_id(
    exponent: int,
    mantissa: int,
    signed: bool,
    bias: int,
    finite_values_only: bool = False,
    nan_repr: int = 1,
) -> int:
    value, offset = 0, 0
    for field, width in (
        (exponent, 8),
        (mantissa, 8),
        (int(signed), 1),
        (bias, 32),
        (int(finite_values_only), 1),
        (nan_repr, 8),
    ):
        value |= (field & ((1 << width) - 1)) << offset
        offset += width
    return value


# The weight types `moe_wna16_marlin_gemm` takes: (bits, bias subtracted from
# each code, whether zero points are required). Unsigned integer types have
# no exponent and `bits` mantissa bits.
WEIGHT_TYPES = {
    "uint4b8": (4, 8, False),
    "uint8b128": (8, 128, False),
    "uint4": (4, 0, True),
    "uint8": (8, 0, True),
}
WEIGHT_TYPE_IDS = {
    scalar_type_id(0, bits, False, bias): name
    for name, (bits, bias, _) in WEIGHT_TYPES.items()
}


def check_repack_arguments(operator, args, packed_shape: tuple[int, int]) -> None:
    """The checks both repacks share: `num_bits`, the sizes, `b_q_weight`
    (int32 of `packed_shape`) and `out` (int32 of the Marlin shape), both
    packed (contiguous)."""
    num_bits, size_k, size_n = args.num_bits, args.size_k, args.size_n
    if num_bits not in SUPPORTED_BITS:
        raise operator.error(f"`num_bits` must be 4 or 8, got {num_bits}.")
    rows = 2 * TILE if args.is_a_8bit else TILE
    layout = " with `is_a_8bit`" if args.is_a_8bit else ""
    if size_k < 0 or size_k % rows:
        raise operator.error(
            f"`size_k` must be a non-negative multiple of {rows} (the Marlin "
            f"tile's rows{layout}), got {size_k}."
        )
    if size_n < 0 or size_n % TILE_N:
        raise operator.error(
            f"`size_n` must be a non-negative multiple of {TILE_N} (the Marlin "
            f"tile's columns), got {size_n}."
        )
    pack = pack_factor(num_bits)
    for name, shape, what in (
        ("b_q_weight", packed_shape, ""),
        ("out", (size_k // TILE, size_n * TILE // pack), " (the Marlin layout)"),
    ):
        meta = getattr(args, name)
        operator.require_dtype(name, meta, ("int32",))
        operator.require_shape(
            name,
            meta,
            shape,
            f"for `size_k` {size_k}, `size_n` {size_n} and `num_bits` {num_bits}{what}",
        )
        if not meta.is_contiguous():
            raise operator.error(
                f"`{name}` must be packed (contiguous), got shape {meta.shape} "
                f"and strides {meta.strides}."
            )
    operator.require_writable("out", args.out)
