"""Matrix products on the CUDA-like platforms: the Triton kernels behind
`gemm`, `linear` and `matmul` (and the tiles `cutlass_scaled_mm` builds on).

Every call is planned as a batch of products ``out[i] = alpha * (a[i] @
b[i]) + bias``, with ``a[i]`` ``(m, k)``, ``b[i]`` ``(k, n)`` and ``out[i]``
``(m, n)``, each operand given by its strides (transposes, column-major
weights, stride-0 broadcasts and 2-D operands shared by a batch need no
copy). Planning (`ProductLayout`):

- batch dimensions along which `b` does not move are folded into the rows
  of `a` and `out` when their strides allow it (a ``(..., k)`` input times a
  2-D weight is one product of all the rows); the remaining batch
  dimensions are coalesced, and a program finds its batch item's offsets
  from them (a small int64 table on the device when more than one is left);
- a product of many rows by a few columns (``n <= ROWS_KERNEL_LIMIT < m``,
  no bias) is computed as its transpose, ``out.T = b.T @ a.T``, so that it
  takes the few-rows kernel below.

Two kernels, chosen from the geometry by `product_config`:

- `tiled_product_kernel`: a program computes one ``BLOCK_M x BLOCK_N``
  tile of `out`, walking K in ``BLOCK_K`` steps with `tl.dot` into a
  float32 accumulator (float64 for float64). Tiles are visited in bands of
  `GROUP_M` tile rows, so that programs running together share their `a`
  rows and `b` columns in the L2 cache. float16 and bfloat16 operands go to
  `tl.dot` as they are stored (tensor cores: wgmma/mma on NVIDIA GPUs);
  float32 and float64 products run at IEEE precision (``input_precision=
  "ieee"``: no TF32, whose 10-bit mantissas would miss the float32
  reference by about 1e-3 relative), so they match a float64 reference as
  closely as a float32 (float64) sum can.
- `rows_product_kernel` (at most `ROWS_KERNEL_LIMIT` rows: decode steps,
  matrix-vector products): memory-bound, it streams ``BLOCK_N`` columns of
  `b` in ``BLOCK_K``-wide slices with vector loads, multiplies them by every
  row of `a` in float32 registers and reduces along K once at the end.

Both apply `alpha`, then add the bias (in float32 for 16-bit floats, as the
bases say: the product and the bias are rounded once together) and store
each element of `out` once, rounded once. Offsets are int32 unless an
operand reaches 2**31 elements (`LARGE`); batch offsets are int64.

Configurations (`gpu_product_config`, no autotuning, sizes checked for
sm_90 by `python -m tests.sm90`): 128 x 128 x 64 tiles with eight warps and
four stages (two wgmma warp groups) for large 16-bit products, 64 x 128 or
64 x 64 when that gives too few programs, 16-row tiles (mma) split finely
along N for 5 to 16 rows, and the rows kernel (128-bit loads of `b`) for up
to four; float32 takes 64 x 64 x 16 tiles and float64 32 x 32 x 16 (DMMA
on sm_90), sizes that do not spill registers.

Under Triton's interpreter (`interpreter_product_config`) the same kernels
run with sizes suited to NumPy: bfloat16 operands are widened to float32
before `tl.dot` (the interpreter's bfloat16 is not IEEE arithmetic;
products of 16-bit values are exact in float32 either way), and up to 16
rows take the rows kernel (the interpreter's `tl.dot` does not use BLAS).
An `out` that shares any memory with an input (even element for element: a
tile's inputs are read by other programs after it is written) is computed
into a staging buffer and copied; zero-size products launch nothing, and a
product with ``k == 0`` writes zeros (plus the bias).
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from infini.ops.core.geometry import byte_range, coalesce, span
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import geometry_table, load_or_zero, store_as
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    staging_like,
)

# Products of at most this many rows take `rows_product_kernel`; more rows
# amortise a `tl.dot` tile of 16 rows over the weight's loads.
ROWS_KERNEL_LIMIT = 4

# Programs that fill an H100/H200 twice (132 multiprocessors): tile shapes
# are narrowed until a product has that many, or cannot.
TARGET_PROGRAMS = 264

# `tl.dot` needs every dimension to be at least 16.
DOT_MINIMUM = 16

# The rows kernel's float32 accumulator (ROWS x BLOCK_N x BLOCK_K): 4096
# elements are 32 registers a thread with four warps, which leaves room for
# the loads in flight; float64 takes half as many elements.
ROWS_ACCUMULATOR = 4096

# Interpreter sizes (`interpreter_product_config`): products a step of the
# rows kernel covers, its step along K, and the tile edge.
INTERPRETER_ROWS_ELEMENTS = 2**20
INTERPRETER_BLOCK = 256
INTERPRETER_TILE = 64

# Element offsets at or past this need 64-bit index arithmetic.
INT32_LIMIT = 2**31

# Programs one launch can have (the first grid dimension).
MAX_PROGRAMS = 2**31 - 1

COMPUTE_TYPE = {
    "float16": tl.float32,
    "bfloat16": tl.float32,
    "float32": tl.float32,
    "float64": tl.float64,
    "int8": tl.int32,
}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1}


# -- device helpers -----------------------------------------------------------


@triton.jit
def batch_offsets(item, geometry, a_stride, b_stride, out_stride, NDIM: tl.constexpr):
    """The first elements of batch item `item` (int64) in `a`, `b` and
    `out`: ``item * stride`` for one batch dimension (``NDIM == 0``), else
    from the geometry table ``[sizes..., a strides..., b strides..., out
    strides...]``."""
    if NDIM == 0:
        a_offset = item * a_stride
        b_offset = item * b_stride
        out_offset = item * out_stride
    else:
        a_offset = item * 0
        b_offset = item * 0
        out_offset = item * 0
        remaining = item
        for step in tl.static_range(NDIM):
            dim = NDIM - 1 - step
            size = tl.load(geometry + dim)
            coordinate = remaining % size
            remaining = remaining // size
            a_offset += coordinate * tl.load(geometry + NDIM + dim)
            b_offset += coordinate * tl.load(geometry + 2 * NDIM + dim)
            out_offset += coordinate * tl.load(geometry + 3 * NDIM + dim)
    return a_offset, b_offset, out_offset


@triton.jit
def grouped_tile(
    program, m, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr
):
    """`(batch item, tile row, tile column)` of program `program`. Within a
    batch item the tiles go in bands of `GROUP_M` tile rows, column after
    column inside a band: the programs that run at the same time read a few
    row blocks of `a` and column blocks of `b`, which stay in the L2
    cache, instead of all of `b` for one row block."""
    tiles_m = tl.cdiv(m, BLOCK_M)
    tiles_n = tl.cdiv(n, BLOCK_N)
    per_item = tiles_m * tiles_n
    item = program // per_item
    tile = program % per_item
    band = GROUP_M * tiles_n
    first = (tile // band) * GROUP_M
    height = tl.minimum(tiles_m - first, GROUP_M)
    within = tile % band
    return item, first + within % height, within // height


@triton.jit
def tile_product(
    acc,
    a_pointers,
    b_pointers,
    row_mask,
    column_mask,
    depth,
    k,
    a_depth_stride,
    b_depth_stride,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    NATIVE: tl.constexpr,
    COMPUTE: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """`acc` plus the product of a ``BLOCK_M x k`` slab of `a` and a ``k x
    BLOCK_N`` slab of `b`, ``BLOCK_K`` at a time (the pointers address the
    first step's tiles). Rows and columns past the operands read zeros. The
    operands go to `tl.dot` as they are stored when `NATIVE` (16-bit floats
    and int8 on GPUs: tensor cores), else converted to `COMPUTE`."""
    a_step = BLOCK_K * a_depth_stride
    b_step = BLOCK_K * b_depth_stride
    for start in range(0, k, BLOCK_K):
        if EVEN_K:
            a_mask = row_mask[:, None]
            b_mask = column_mask[None, :]
        else:
            left = k - start
            a_mask = row_mask[:, None] & (depth[None, :] < left)
            b_mask = (depth[:, None] < left) & column_mask[None, :]
        if NATIVE:
            x = tl.load(a_pointers, mask=a_mask, other=0)
            y = tl.load(b_pointers, mask=b_mask, other=0)
        else:
            x = load_or_zero(a_pointers, a_mask, COMPUTE)
            y = load_or_zero(b_pointers, b_mask, COMPUTE)
        acc = tl.dot(x, y, acc, input_precision=PRECISION, out_dtype=acc.dtype)
        a_pointers += a_step
        b_pointers += b_step
    return acc


@triton.jit
def epilogue(
    value,
    bias,
    column,
    column_mask,
    bias_stride,
    alpha,
    alpha_low,
    HAS_ALPHA: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    WIDE: tl.constexpr,
):
    """``alpha * value + bias`` in the accumulator's type. float64 products
    take `alpha` as two float32 halves (a kernel scalar is float32), whose
    float64 sum carries 48 bits of it."""
    if HAS_ALPHA:
        if WIDE:
            value = value * (
                tl.cast(alpha, tl.float64) + tl.cast(alpha_low, tl.float64)
            )
        else:
            value = value * alpha
    if HAS_BIAS:
        shift = load_or_zero(bias + column * bias_stride, column_mask, value.dtype)
        value = value + shift[None, :]
    return value


# -- kernels ------------------------------------------------------------------


@triton.jit
def tiled_product_kernel(
    out,
    a,
    b,
    bias,
    geometry,
    m,
    n,
    k,
    a_batch_stride,
    b_batch_stride,
    out_batch_stride,
    a_row_stride,
    a_depth_stride,
    b_depth_stride,
    b_column_stride,
    out_row_stride,
    out_column_stride,
    bias_stride,
    alpha,
    alpha_low,
    NDIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    LARGE: tl.constexpr,
    NATIVE: tl.constexpr,
    COMPUTE: tl.constexpr,
    PRECISION: tl.constexpr,
    HAS_ALPHA: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    WIDE: tl.constexpr,
):
    item, tile_m, tile_n = grouped_tile(
        tl.program_id(0), m, n, BLOCK_M, BLOCK_N, GROUP_M
    )
    a_base, b_base, out_base = batch_offsets(
        item.to(tl.int64), geometry, a_batch_stride, b_batch_stride, out_batch_stride,
        NDIM,
    )  # fmt: skip
    row = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    column = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    if LARGE:
        row = row.to(tl.int64)
        column = column.to(tl.int64)
        depth = depth.to(tl.int64)
    row_mask = row < m
    column_mask = column < n
    a_pointers = (
        a + a_base + row[:, None] * a_row_stride + depth[None, :] * a_depth_stride
    )
    b_pointers = (
        b + b_base + depth[:, None] * b_depth_stride + column[None, :] * b_column_stride
    )
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    acc = tile_product(
        acc, a_pointers, b_pointers, row_mask, column_mask, depth, k,
        a_depth_stride, b_depth_stride, BLOCK_K, EVEN_K, NATIVE, COMPUTE, PRECISION,
    )  # fmt: skip
    value = epilogue(
        acc, bias, column, column_mask, bias_stride, alpha, alpha_low,
        HAS_ALPHA, HAS_BIAS, WIDE,
    )  # fmt: skip
    store_as(
        out + out_base + row[:, None] * out_row_stride
        + column[None, :] * out_column_stride,
        value,
        row_mask[:, None] & column_mask[None, :],
    )  # fmt: skip


@triton.jit
def rows_product_kernel(
    out,
    a,
    b,
    bias,
    geometry,
    m,
    n,
    k,
    a_batch_stride,
    b_batch_stride,
    out_batch_stride,
    a_row_stride,
    a_depth_stride,
    b_depth_stride,
    b_column_stride,
    out_row_stride,
    out_column_stride,
    bias_stride,
    alpha,
    alpha_low,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    LARGE: tl.constexpr,
    COMPUTE: tl.constexpr,
    HAS_ALPHA: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    WIDE: tl.constexpr,
):
    # Program: one block of BLOCK_N columns of one batch item, all its rows.
    program = tl.program_id(0)
    tiles_n = tl.cdiv(n, BLOCK_N)
    item = program // tiles_n
    a_base, b_base, out_base = batch_offsets(
        item.to(tl.int64), geometry, a_batch_stride, b_batch_stride, out_batch_stride,
        NDIM,
    )  # fmt: skip
    row = tl.arange(0, ROWS)
    column = (program % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    if LARGE:
        row = row.to(tl.int64)
        column = column.to(tl.int64)
        depth = depth.to(tl.int64)
    row_mask = (row < m)[:, None, None]
    column_mask = (column < n)[None, :, None]
    # (rows, 1, depth) and (1, columns, depth): each step multiplies every
    # row by every column slice; the sums along K wait until the end, so
    # the loop is loads and multiply-adds only.
    a_pointers = (
        a + a_base + row[:, None, None] * a_row_stride
        + depth[None, None, :] * a_depth_stride
    )  # fmt: skip
    b_pointers = (
        b + b_base + column[None, :, None] * b_column_stride
        + depth[None, None, :] * b_depth_stride
    )  # fmt: skip
    acc = tl.zeros([ROWS, BLOCK_N, BLOCK_K], dtype=COMPUTE)
    a_step = BLOCK_K * a_depth_stride
    b_step = BLOCK_K * b_depth_stride
    for start in range(0, k, BLOCK_K):
        if EVEN_K:
            x = load_or_zero(a_pointers, row_mask, COMPUTE)
            y = load_or_zero(b_pointers, column_mask, COMPUTE)
        else:
            depth_mask = (depth < k - start)[None, None, :]
            x = load_or_zero(a_pointers, row_mask & depth_mask, COMPUTE)
            y = load_or_zero(b_pointers, column_mask & depth_mask, COMPUTE)
        acc += x * y
        a_pointers += a_step
        b_pointers += b_step
    total = tl.sum(acc, axis=2)
    value = epilogue(
        total, bias, column, column < n, bias_stride, alpha, alpha_low,
        HAS_ALPHA, HAS_BIAS, WIDE,
    )  # fmt: skip
    store_as(
        out + out_base + row[:, None] * out_row_stride
        + column[None, :] * out_column_stride,
        value,
        (row < m)[:, None] & (column < n)[None, :],
    )  # fmt: skip


TILED_KERNEL = Kernel(tiled_product_kernel)
ROWS_KERNEL = Kernel(rows_product_kernel)


# -- configurations -----------------------------------------------------------


@dataclass(frozen=True)
class ProductConfig:
    """How a product is launched: `kernel` is ``"tiles"`` (`block_m` rows
    a tile) or ``"rows"`` (`block_m` is the padded row count)."""

    kernel: str
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


def _programs(m: int, n: int, block_m: int, block_n: int, batch: int) -> int:
    return -(-m // block_m) * -(-n // block_n) * batch


def product_config(
    m: int, n: int, k: int, dtype: str, *, batch: int = 1, unit_columns: bool = False
) -> ProductConfig:
    """The launch configuration of a batch of `batch` ``(m, k) @ (k, n)``
    products of `dtype` operands (``int8`` for `cutlass_scaled_mm`):
    `gpu_product_config`, or under Triton's interpreter (where each program
    step is a round of NumPy calls) `interpreter_product_config`."""
    if INTERPRETER:
        return interpreter_product_config(m, n, k, dtype)
    return gpu_product_config(m, n, k, dtype, batch=batch, unit_columns=unit_columns)


def interpreter_product_config(m: int, n: int, k: int, dtype: str) -> ProductConfig:
    """Few programs of few steps, as the interpreter runs each step of each
    program as NumPy calls: the rows kernel takes up to 16 rows (the
    interpreter's `tl.dot` is a NumPy loop without BLAS, slower than the
    rows kernel's products) with steps of up to 256 along K and 2**20
    products; tiles are up to 64 x 64 x 64. The kernels are the GPU ones;
    only the sizes (and the kernel of 5 to 16 rows) differ, and products
    longer than a step still take several."""
    if m <= DOT_MINIMUM and dtype != "int8":
        rows = next_power_of_two(m)
        block_k = min(next_power_of_two(k), INTERPRETER_BLOCK)
        block_n = min(
            next_power_of_two(n), max(INTERPRETER_ROWS_ELEMENTS // (rows * block_k), 1)
        )
        return ProductConfig("rows", rows, block_n, block_k, 1, 4, 1)
    return ProductConfig(
        "tiles",
        min(max(next_power_of_two(m), DOT_MINIMUM), INTERPRETER_TILE),
        min(max(next_power_of_two(n), DOT_MINIMUM), INTERPRETER_TILE),
        min(max(next_power_of_two(k), DOT_MINIMUM), INTERPRETER_TILE),
        8,
        4,
        1,
    )


def gpu_product_config(
    m: int, n: int, k: int, dtype: str, *, batch: int = 1, unit_columns: bool = False
) -> ProductConfig:
    """The configuration for sm_90, chosen from the geometry (no
    autotuning). `unit_columns`: `b` is contiguous along N (a row-major
    ``(k, n)`` matrix) rather than along K (a transposed ``(n, k)``
    weight).

    - At most `ROWS_KERNEL_LIMIT` rows of a float type: the rows kernel,
      ``BLOCK_K`` spanning 1 KiB of a row of `b` (or ``BLOCK_N`` spanning
      up to 256 bytes when `b` is contiguous along N), narrowed along N
      until the product has `TARGET_PROGRAMS` programs.
    - Up to 16 rows: tiles of 16 rows by 64 columns (narrowed to 16 for
      more programs) with long K steps: a split along N that streams `b`.
    - 16-bit floats and int8, more rows: 128 x 128 tiles with eight warps
      (two wgmma warp groups) and four pipeline stages (three for int8)
      when that gives a program per multiprocessor, else 64 x 128 or 64 x
      64 with four warps; K steps of 128 bytes (64 16-bit values, 128 int8
      ones; twice that for 16-row tiles).
    - float32 (IEEE multiply-adds, no tensor cores): 64 x 64 x 16 tiles (16
      x 64 x 32 for up to 16 rows); float64 (DMMA on sm_90): 32 x 32 x 16.
      Both keep their accumulators and operands in registers without
      spilling.
    """
    size = ELEMENT_BYTES[dtype]
    if m <= ROWS_KERNEL_LIMIT and dtype != "int8":
        rows = next_power_of_two(m)
        budget = ROWS_ACCUMULATOR // (2 if dtype == "float64" else 1) // rows
        if unit_columns:
            block_n = min(max(next_power_of_two(n), 16), 256 // size)
            while block_n > 16 and _programs(1, n, 1, block_n, batch) < TARGET_PROGRAMS:
                block_n //= 2
            block_k = max(budget // block_n, 1)
            block_k = min(block_k, max(next_power_of_two(k), 1))
        else:
            block_k = min(max(next_power_of_two(k), 16), 1024 // size, budget)
            block_n = min(max(budget // block_k, 1), next_power_of_two(n))
            while block_n > 1 and _programs(1, n, 1, block_n, batch) < TARGET_PROGRAMS:
                block_n //= 2
        return ProductConfig("rows", rows, block_n, block_k, 1, 4, 1)
    depth = max(next_power_of_two(k), DOT_MINIMUM)
    if dtype == "float64":
        block_n = min(32, max(next_power_of_two(n), DOT_MINIMUM))
        return ProductConfig("tiles", 32 if m > 16 else 16, block_n, 16, 8, 4, 3)
    if dtype == "float32":
        if m <= 16:
            block_n = 64
            while (
                block_n > 16 and _programs(m, n, 16, block_n, batch) < TARGET_PROGRAMS
            ):
                block_n //= 2
            return ProductConfig("tiles", 16, block_n, min(32, depth), 8, 4, 3)
        block_n = min(64, max(next_power_of_two(n), DOT_MINIMUM))
        return ProductConfig("tiles", 64, block_n, 16, 8, 4, 3)
    # 16-bit floats and int8: tensor cores.
    step = 128 // size
    if m <= 16:
        block_n = 64
        while block_n > 16 and _programs(m, n, 16, block_n, batch) < TARGET_PROGRAMS:
            block_n //= 2
        return ProductConfig("tiles", 16, block_n, min(2 * step, depth), 8, 4, 4)
    block_k = min(step, depth)
    if m > 64 and n > 64 and _programs(m, n, 128, 128, batch) >= TARGET_PROGRAMS // 2:
        return ProductConfig("tiles", 128, 128, block_k, 8, 8, 4 if size == 2 else 3)
    if n > 64 and _programs(m, n, 64, 128, batch) >= TARGET_PROGRAMS // 2:
        return ProductConfig("tiles", 64, 128, block_k, 8, 4, 4)
    block_n = min(64, max(next_power_of_two(n), DOT_MINIMUM))
    return ProductConfig("tiles", 64, block_n, block_k, 8, 4, 4)


# -- planning -----------------------------------------------------------------


class ProductLayout:
    """A batch of ``(m, k) @ (k, n)`` products by strides, simplified.

    Arguments: the batch shape, the strides of each operand along it (0
    where an operand is shared by the batch), ``m, n, k``, and the strides
    of `a` along ``(m, k)``, of `b` along ``(k, n)`` and of `out` along
    ``(m, n)``. `transposable`: the product may be computed as its
    transpose (no per-column bias)."""

    def __init__(
        self,
        batch_shape,
        a_batch,
        b_batch,
        out_batch,
        m,
        n,
        k,
        a_strides,
        b_strides,
        out_strides,
        *,
        transposable: bool = True,
    ) -> None:
        batch_shape = tuple(batch_shape)
        count = 1
        for size in batch_shape:
            count *= size
        self.empty = count * m * n == 0
        a_m, a_k = a_strides
        out_m, out_n = out_strides
        if not self.empty and all(
            stride == 0 or size == 1 for size, stride in zip(batch_shape, b_batch)
        ):
            # `b` is the same for every item: the items' rows of `a` and
            # `out` may be one taller product.
            shape, (a_rows, out_rows) = coalesce(
                batch_shape + (m,),
                [tuple(a_batch) + (a_m,), tuple(out_batch) + (out_m,)],
            )
            if shape:
                m, a_m, out_m = shape[-1], a_rows[-1], out_rows[-1]
                batch_shape = shape[:-1]
                a_batch, out_batch = a_rows[:-1], out_rows[:-1]
                b_batch = (0,) * len(batch_shape)
            else:
                batch_shape, a_batch, b_batch, out_batch = (), (), (), ()
        self.transposed = transposable and n <= ROWS_KERNEL_LIMIT < m and not self.empty
        b_k, b_n = b_strides
        if self.transposed:
            m, n = n, m
            a_m, a_k, b_k, b_n = b_n, b_k, a_k, a_m
            out_m, out_n = out_n, out_m
            a_batch, b_batch = b_batch, a_batch
        if self.empty:
            batch_shape, strides = (), [(), (), ()]
        else:
            batch_shape, strides = coalesce(
                batch_shape, [tuple(a_batch), tuple(b_batch), tuple(out_batch)]
            )
        self.batch_shape = batch_shape
        self.batch_strides = strides
        self.batch = 1
        for size in batch_shape:
            self.batch *= size
        self.m, self.n, self.k = m, n, k
        self.a_strides = (a_m, a_k)
        self.b_strides = (b_k, b_n)
        self.out_strides = (out_m, out_n)

    def large(self) -> bool:
        """Whether an offset within one item's operands can reach 2**31
        elements (the batch offsets are int64 anyway)."""
        m, n, k = self.m, self.n, self.k
        spans = (
            span((m, k), self.a_strides),
            span((k, n), self.b_strides),
            span((m, n), self.out_strides),
        )
        return max(spans) >= INT32_LIMIT


class OverlapCheck:
    """Whether an output shares any byte with an input. A product must stage
    even an output that is an input element for element: other programs
    still read a tile's inputs after it is written."""

    def __init__(self, out, inputs) -> None:
        self.out_range = byte_range(0, out.shape, out.strides, out.element_size)
        self.input_ranges = [
            byte_range(0, meta.shape, meta.strides, meta.element_size)
            if meta is not None
            else (0, 0)
            for meta in inputs
        ]

    def __call__(self, out, inputs) -> bool:
        address = out.data_ptr()
        low, high = address + self.out_range[0], address + self.out_range[1]
        if low == high:
            return False
        for tensor, (first, last) in zip(inputs, self.input_ranges):
            if tensor is None or first == last:
                continue
            start = tensor.data_ptr()
            if start + first < high and low < start + last:
                return True
        return False


def split_alpha(alpha: float) -> tuple[float, float]:
    """`alpha` as float32 `high` plus float32 `low` (float64 kernels add
    them back)."""
    import numpy as np

    high = float(np.float32(alpha))
    return high, float(np.float32(alpha - high))


class ProductPlan:
    """The planned launch of ``out = alpha * (a @ b) + bias`` over a
    `ProductLayout` for `operator` (whose `device` and `error` it uses;
    `output` names its output parameter): call it as ``plan(stream, out, a,
    b, bias)`` with the caller's tensors (`bias` may be `None`)."""

    def __init__(
        self,
        operator,
        layout: ProductLayout,
        dtype: str,
        out,
        inputs,
        *,
        output: str,
        alpha: float = 1.0,
        bias=None,
    ) -> None:
        self.device = device = operator.device
        self.layout = layout
        self.empty = layout.empty
        self.transposed = layout.transposed
        self.overlap = OverlapCheck(out, inputs)
        if self.empty:
            self.geometry = None
            self.config = None
            return
        m, n, k = layout.m, layout.n, layout.k
        unit_columns = layout.b_strides[1] == 1 and layout.b_strides[0] != 1
        self.config = config = product_config(
            m, n, k, dtype, batch=layout.batch, unit_columns=unit_columns
        )
        ndim = len(layout.batch_shape)
        if ndim <= 1:
            self.geometry = None
            batch_strides = tuple(s[0] if s else 0 for s in layout.batch_strides)
            ndim = 0
        else:
            self.geometry = geometry_table(
                layout.batch_shape, layout.batch_strides, device
            )
            batch_strides = (0, 0, 0)
        alpha = float(alpha)
        alpha_high, alpha_low = split_alpha(alpha)
        arguments = (
            out,
            Pointer(dtype),
            Pointer(dtype),
            bias if bias is not None else Pointer(dtype),
            Pointer("int64"),
            m,
            n,
            k,
            *batch_strides,
            *layout.a_strides,
            *layout.b_strides,
            *layout.out_strides,
            bias.strides[0] if bias is not None else 0,
            alpha_high,
            alpha_low,
        )
        common = {
            "NDIM": ndim,
            "BLOCK_N": config.block_n,
            "BLOCK_K": config.block_k,
            "EVEN_K": k % config.block_k == 0,
            "LARGE": layout.large(),
            "COMPUTE": COMPUTE_TYPE[dtype],
            "HAS_ALPHA": alpha != 1.0,
            "HAS_BIAS": bias is not None,
            "WIDE": dtype == "float64",
        }
        if config.kernel == "rows":
            programs = -(-n // config.block_n) * layout.batch
            kernel, constexprs = ROWS_KERNEL, {"ROWS": config.block_m, **common}
        else:
            programs = _programs(m, n, config.block_m, config.block_n, layout.batch)
            kernel = TILED_KERNEL
            constexprs = {
                "BLOCK_M": config.block_m,
                "GROUP_M": config.group_m,
                # The interpreter's bfloat16 is not IEEE arithmetic; its
                # float16 products go through float32 as on GPUs.
                "NATIVE": dtype == "float16"
                or (dtype == "bfloat16" and not INTERPRETER),
                "PRECISION": "ieee",
                **common,
            }
        if programs > MAX_PROGRAMS:
            raise operator.error(
                f"the CUDA-like kernel (slot 0) cannot write `{output}` "
                f"{tuple(out.shape)}: its {layout.batch} product(s) of ({m}, {k}) "
                f"by ({k}, {n}) need {programs} programs, more than one launch "
                f"holds ({MAX_PROGRAMS}); split the call."
            )
        self._launch = kernel.bind(
            grid=(programs,),
            arguments=arguments,
            constexprs=constexprs,
            device=device,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )

    def __call__(self, stream, out, a, b, bias) -> None:
        if self.empty:
            return
        inputs = (a, b, bias)
        if self.transposed:
            a, b = b, a
        if bias is None:
            bias = out
        geometry = out if self.geometry is None else self.geometry
        if self.overlap(out, inputs):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, a, b, bias, geometry)
                out.copy_(staging)
            return
        self._launch(stream, out, a, b, bias, geometry)
