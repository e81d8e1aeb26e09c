"""Convolutions on the CUDA-like platforms: one implicit-GEMM Triton kernel
shared by `conv1d`, `conv2d`, `conv3d`, `convolution` and `conv_infinilm`.

Every convolution is planned as a 3-d one: missing leading spatial
dimensions have size 1 (kernel 1, stride 1, no padding, stride 0 in every
tensor). Per group ``g`` the convolution is the product

    out[position, channel] = sum over (input channel, kernel tap) of
        input[position + tap, input channel] * weight[channel, input channel, tap]

with M = batch x output positions (flattened, the last spatial dimension
fastest), N = the group's output channels and K = the group's input channels
x the kernel taps. A program computes one (BLOCK_M positions x BLOCK_N
channels) tile of `out`: it gathers each (BLOCK_M x BLOCK_K) tile of input
values by index arithmetic straight from `input` (zeros where a tap reads
padding; no im2col buffer), loads the matching (BLOCK_K x BLOCK_N) weight
tile, and accumulates `tl.dot` products in float32 (float64 for float64).
The bias is added to the accumulator, and the tile is rounded once when it
is stored. Three ways to walk K, chosen from the geometry:

- `CHANNEL_BLOCKS` (16 or more input channels per group): one loop over
  (tap, block of BLOCK_K input channels); the tap is a scalar per step, so
  the gather is a row offset per position plus a column offset per
  channel. With channels-last operands the columns are contiguous.
- `FLAT` (2 to 15 input channels per group): K is flattened as
  ``channel * taps + tap`` and each step decomposes its BLOCK_K indices, so
  a few channels do not leave most of a BLOCK_K-wide step empty.
- `DIRECT` (one input channel per group: depthwise convolutions, or a
  single-channel input): no product to tile; each output channel reads one
  input channel, and the tile is accumulated tap by tap with multiply-adds
  over all output channels at once.

Transposed convolutions (`convolution` with ``transposed=True``) are the
same product in gather form: output position ``o`` reads input position
``i`` through tap ``t`` when ``o + padding - t * dilation = i * stride``;
the positions where the division is not exact are masked off like padding.
Only the weight strides differ (``(C_in, C_out / groups, *kernel)``).

Tensor cores: float16 and bfloat16 operands go to `tl.dot` as they are
(mma/wgmma on NVIDIA GPUs); float32 and float64 products run at IEEE
precision (no TF32; float64 on the GPU's float64 units), so results match a
float64 reference as closely as a float32 (float64) sum can. Under Triton's
interpreter bfloat16 operands are widened to float32 first (its bfloat16
arithmetic is wrong); products of 16-bit values are exact in float32 either
way.

Registers: tiles are oriented so that their fastest dimension runs along
the operand's contiguous one (positions in NCHW-like layouts, channels in
channels-last ones), which Triton's default layouts spread across a warp's
threads; the per-position values the loop needs are kept to the input
index of tap 0 and one row offset, and offsets are 32-bit unless a tensor
reaches past 2^31 elements.

Block sizes come from the geometry (no autotuning), four warps each: 64 x
64 x 32 for the products (K steps of 16 for the flat walk, 32 x 32 x 16 for
float64), N and K narrowed to the channels there are; 2048 (float64: 1024)
outputs for a direct tile, 8 channels by 256 positions, or up to 64
channels across the threads for channels-last inputs. None of them spills
(`python -m tests.sm90`). The interpreter runs each program as NumPy steps,
so it takes the largest tiles the problem fills. An `out` sharing any
memory with an input is computed into a staging buffer and copied;
zero-size problems launch nothing.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.core.geometry import ranges_overlap, span
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import from_bfloat16, load_or_zero, store_as
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    staging_like,
)

# How a program walks the reduction (see the module docstring).
CHANNEL_BLOCKS = 0
FLAT = 1
DIRECT = 2

# Input channels per group from which each tap's channels are walked in
# blocks (`CHANNEL_BLOCKS`): fewer leave most of a 16-wide block empty.
CHANNEL_BLOCK_MINIMUM = 16

# Offsets and indices are 32-bit below this (with room for a tile's
# overhang and the negative offsets of padding), 64-bit from it.
INT32_LIMIT = 2**31 - 2**24

# Channels from which a direct (depthwise) tile of a channels-last input
# runs its channels across the threads of a warp.
DIRECT_CHANNELS_ACROSS_THREADS = 32

# The interpreter checks every 32-bit integer operation for overflow
# (slowly) and no 64-bit one, so it runs with 64-bit offsets; tests turn
# this off to run the GPUs' 32-bit offsets through those checks.
INTERPRETER_LONG_OFFSETS = True

# `tl.dot` needs every dimension to be at least 16.
DOT_MINIMUM = 16

# GPU tiles (BLOCK_M, BLOCK_N, BLOCK_K) of the products, four warps each,
# none of which spills: float64 accumulators take twice the registers.
PRODUCT_TILES = {
    "float16": (64, 64, 32),
    "bfloat16": (64, 64, 32),
    "float32": (64, 64, 32),
    "float64": (32, 32, 16),
}
# The flat walk decomposes every (position, K) index of a step: narrower
# steps keep those temporaries in registers.
FLAT_BLOCK_K = 16

# Interpreter tiles: as large as the problem, up to these sizes (each
# program and step is a NumPy operation there). Channel blocks stay
# smaller, so that the tests walk several blocks per tap.
INTERPRETER_BLOCK_M = 256
INTERPRETER_DIRECT_BLOCK_M = 1024
INTERPRETER_BLOCK_N = 64
INTERPRETER_DIRECT_BLOCK_N = 128
INTERPRETER_BLOCK_K = 128
INTERPRETER_CHANNEL_BLOCK = 64


@triton.jit
def tap_offsets(
    base_d,
    base_h,
    base_w,
    td,
    th,
    tw,
    in_d,
    in_h,
    in_w,
    stride_d,
    stride_h,
    stride_w,
    dilation_d,
    dilation_h,
    dilation_w,
    input_d_step,
    input_h_step,
    input_w_step,
    TRANSPOSED: tl.constexpr,
):
    """The spatial offsets in `input` that output positions read through
    kernel taps ``(td, th, tw)``, and whether the values exist. Position
    and tap values broadcast (vectors, or expanded along different axes for
    a 2-d tile); one call for the three dimensions, since the interpreter
    pays for every call of a `triton.jit` function.

    Not transposed: `base_*` is ``o * stride - padding``, the input index
    of tap 0, and the offsets returned are relative to it (the row offsets
    of tap 0 hold the rest). Transposed: `base_*` is ``o + padding``;
    output index ``o`` reads ``i`` through tap ``t`` when ``o + padding -
    t * dilation = i * stride``, and the offsets returned are absolute."""
    if TRANSPOSED:
        shifted_d = base_d - td * dilation_d
        shifted_h = base_h - th * dilation_h
        shifted_w = base_w - tw * dilation_w
        index_d = shifted_d // stride_d
        index_h = shifted_h // stride_h
        index_w = shifted_w // stride_w
        valid = (shifted_d >= 0) & (index_d * stride_d == shifted_d)
        valid = valid & (shifted_h >= 0) & (index_h * stride_h == shifted_h)
        valid = valid & (shifted_w >= 0) & (index_w * stride_w == shifted_w)
        valid = valid & (index_d < in_d) & (index_h < in_h) & (index_w < in_w)
        offsets = index_d * input_d_step + index_h * input_h_step
        offsets += index_w * input_w_step
    else:
        shift_d = td * dilation_d
        shift_h = th * dilation_h
        shift_w = tw * dilation_w
        index_d = base_d + shift_d
        index_h = base_h + shift_h
        index_w = base_w + shift_w
        valid = (index_d >= 0) & (index_d < in_d)
        valid = valid & (index_h >= 0) & (index_h < in_h)
        valid = valid & (index_w >= 0) & (index_w < in_w)
        offsets = shift_d * input_d_step + shift_h * input_h_step
        offsets += shift_w * input_w_step
    return offsets, valid


@triton.jit
def convolution_kernel(
    out,
    input,
    weight,
    bias,
    positions,
    out_d,
    out_h,
    out_w,
    in_d,
    in_h,
    in_w,
    kernel_d,
    kernel_h,
    kernel_w,
    stride_d,
    stride_h,
    stride_w,
    padding_d,
    padding_h,
    padding_w,
    dilation_d,
    dilation_h,
    dilation_w,
    in_per_group,
    out_per_group,
    channels,
    m_tiles,
    n_tiles,
    input_batch_step,
    input_channel_step,
    input_d_step,
    input_h_step,
    input_w_step,
    weight_out_step,
    weight_group_step,
    weight_in_step,
    weight_d_step,
    weight_h_step,
    weight_w_step,
    out_batch_step,
    out_channel_step,
    out_d_step,
    out_h_step,
    out_w_step,
    bias_step,
    MODE: tl.constexpr,
    TRANSPOSED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    NATIVE: tl.constexpr,
    COMPUTE: tl.constexpr,
    INDEX: tl.constexpr,
    INPUT_DIM: tl.constexpr,
    OUT_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Channel tiles vary fastest, so that the programs sharing an input tile
    # run together and find it in the L2 cache.
    program = tl.program_id(0).to(INDEX)
    n_tile = program % n_tiles
    rest = program // n_tiles
    m_tile = rest % m_tiles
    group = rest // m_tiles

    # Rows: output positions. Only what the loop needs stays live through
    # it (registers): the input index of tap 0 per dimension and the row
    # offsets; the output offsets are computed again after the loop.
    row = m_tile * BLOCK_M + tl.arange(0, BLOCK_M).to(INDEX)
    row_mask = row < positions
    ow = row % out_w
    rest_row = row // out_w
    oh = rest_row % out_h
    rest_row = rest_row // out_h
    od = rest_row % out_d
    item = rest_row // out_d
    input_rows = item * input_batch_step
    if TRANSPOSED:
        base_d = od + padding_d
        base_h = oh + padding_h
        base_w = ow + padding_w
    else:
        base_d = od * stride_d - padding_d
        base_h = oh * stride_h - padding_h
        base_w = ow * stride_w - padding_w
        input_rows += base_d * input_d_step + base_h * input_h_step
        input_rows += base_w * input_w_step

    # Columns: output channels (of the group, or all of them for DIRECT).
    column = n_tile * BLOCK_N + tl.arange(0, BLOCK_N).to(INDEX)
    if MODE == 2:
        column_mask = column < channels
        column_group = column // out_per_group
        weight_columns = column_group * weight_group_step
        weight_columns += (column - column_group * out_per_group) * weight_out_step
        out_channel = column
    else:
        column_mask = column < out_per_group
        weight_columns = group * weight_group_step + column * weight_out_step
        out_channel = group * out_per_group + column
    # In `INDEX` (the interpreter checks 32-bit arithmetic, slowly), as is
    # everything derived from the loop counters.
    taps = tl.cast(kernel_d * kernel_h * kernel_w, INDEX)
    plane = tl.cast(kernel_h * kernel_w, INDEX)

    # Tiles are oriented so that their last (fastest) dimension runs along
    # the operand's contiguous one, which Triton's default layouts spread
    # across the threads of a warp: positions for `input` (`out`) with
    # position dimension `INPUT_DIM` (`OUT_DIM`) 1, channels with 0. A
    # position vector is expanded at axis ``1 - DIM``, a channel vector at
    # ``DIM``. The loads are written out rather than called (`load_or_zero`):
    # the interpreter pays for every call of a `triton.jit` function.
    ROWS: tl.constexpr = 1 - INPUT_DIM
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=COMPUTE)
    if MODE == 0:
        # CHANNEL_BLOCKS: one step per (tap, block of input channels).
        group_input = input + group * in_per_group * input_channel_step
        blocks = tl.cast(tl.cdiv(in_per_group, BLOCK_K), INDEX)
        lanes = tl.arange(0, BLOCK_K).to(INDEX)
        for counter in range(0, taps * blocks):
            step = tl.cast(counter, INDEX)
            tap = step // blocks
            lane = (step - tap * blocks) * BLOCK_K + lanes
            lane_mask = lane < in_per_group
            td = tap // plane
            th = (tap // kernel_w) % kernel_h
            tw = tap % kernel_w
            spatial, valid = tap_offsets(
                base_d,
                base_h,
                base_w,
                td,
                th,
                tw,
                in_d,
                in_h,
                in_w,
                stride_d,
                stride_h,
                stride_w,
                dilation_d,
                dilation_h,
                dilation_w,
                input_d_step,
                input_h_step,
                input_w_step,
                TRANSPOSED,
            )
            a = tl.load(
                group_input
                + tl.expand_dims(input_rows + spatial, ROWS)
                + tl.expand_dims(lane * input_channel_step, INPUT_DIM),
                mask=tl.expand_dims(valid & row_mask, ROWS)
                & tl.expand_dims(lane_mask, INPUT_DIM),
                other=0.0,
            )
            if INPUT_DIM == 1:
                a = tl.trans(a)
            tap_weight = td * weight_d_step + th * weight_h_step + tw * weight_w_step
            b = tl.load(
                weight
                + tap_weight
                + lane[:, None] * weight_in_step
                + weight_columns[None, :],
                mask=lane_mask[:, None] & column_mask[None, :],
                other=0.0,
            )
            if not NATIVE:
                if a.dtype == tl.bfloat16:
                    a = from_bfloat16(a)
                    b = from_bfloat16(b)
                a = a.to(COMPUTE)
                b = b.to(COMPUTE)
            acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=COMPUTE)
        ACC_DIM: tl.constexpr = 0
    elif MODE == 1:
        # FLAT: K = input channel * taps + tap, decomposed per step.
        group_input = input + group * in_per_group * input_channel_step
        reduction = in_per_group * taps
        lanes = tl.arange(0, BLOCK_K).to(INDEX)
        for first in range(0, reduction, BLOCK_K):
            lane = first + lanes
            lane_mask = lane < reduction
            channel = lane // taps
            tap = lane - channel * taps
            td = tap // plane
            th = (tap // kernel_w) % kernel_h
            tw = tap % kernel_w
            spatial, valid = tap_offsets(
                tl.expand_dims(base_d, ROWS),
                tl.expand_dims(base_h, ROWS),
                tl.expand_dims(base_w, ROWS),
                tl.expand_dims(td, INPUT_DIM),
                tl.expand_dims(th, INPUT_DIM),
                tl.expand_dims(tw, INPUT_DIM),
                in_d,
                in_h,
                in_w,
                stride_d,
                stride_h,
                stride_w,
                dilation_d,
                dilation_h,
                dilation_w,
                input_d_step,
                input_h_step,
                input_w_step,
                TRANSPOSED,
            )
            a = tl.load(
                group_input
                + spatial
                + tl.expand_dims(input_rows, ROWS)
                + tl.expand_dims(channel * input_channel_step, INPUT_DIM),
                mask=valid
                & tl.expand_dims(row_mask, ROWS)
                & tl.expand_dims(lane_mask, INPUT_DIM),
                other=0.0,
            )
            if INPUT_DIM == 1:
                a = tl.trans(a)
            lane_weight = channel * weight_in_step + td * weight_d_step
            lane_weight += th * weight_h_step + tw * weight_w_step
            b = tl.load(
                weight + lane_weight[:, None] + weight_columns[None, :],
                mask=lane_mask[:, None] & column_mask[None, :],
                other=0.0,
            )
            if not NATIVE:
                if a.dtype == tl.bfloat16:
                    a = from_bfloat16(a)
                    b = from_bfloat16(b)
                a = a.to(COMPUTE)
                b = b.to(COMPUTE)
            acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=COMPUTE)
        ACC_DIM: tl.constexpr = 0
    else:
        # DIRECT: output channel `c` reads input channel `c // out_per_group`
        # (its group's only one); multiply-adds tap by tap, in the input's
        # orientation.
        if INPUT_DIM == 1:
            acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=COMPUTE)
        column_input = column_group * input_channel_step
        for counter in range(0, taps):
            tap = tl.cast(counter, INDEX)
            td = tap // plane
            th = (tap // kernel_w) % kernel_h
            tw = tap % kernel_w
            spatial, valid = tap_offsets(
                base_d,
                base_h,
                base_w,
                td,
                th,
                tw,
                in_d,
                in_h,
                in_w,
                stride_d,
                stride_h,
                stride_w,
                dilation_d,
                dilation_h,
                dilation_w,
                input_d_step,
                input_h_step,
                input_w_step,
                TRANSPOSED,
            )
            values = tl.load(
                input
                + tl.expand_dims(input_rows + spatial, ROWS)
                + tl.expand_dims(column_input, INPUT_DIM),
                mask=tl.expand_dims(valid & row_mask, ROWS)
                & tl.expand_dims(column_mask, INPUT_DIM),
                other=0.0,
            )
            tap_weight = td * weight_d_step + th * weight_h_step + tw * weight_w_step
            taps_of_columns = tl.load(
                weight + tap_weight + weight_columns, mask=column_mask, other=0.0
            )
            if values.dtype == tl.bfloat16:
                values = from_bfloat16(values)
                taps_of_columns = from_bfloat16(taps_of_columns)
            taps_of_columns = taps_of_columns.to(COMPUTE)
            acc += values.to(COMPUTE) * tl.expand_dims(taps_of_columns, INPUT_DIM)
        ACC_DIM: tl.constexpr = INPUT_DIM

    # The epilogue, in `out`'s orientation: positions again (the loop kept
    # only what it needed), the bias, and one rounding on the store.
    if ACC_DIM != OUT_DIM:
        acc = tl.trans(acc)
    OUT_ROWS: tl.constexpr = 1 - OUT_DIM
    if HAS_BIAS:
        shift = load_or_zero(bias + out_channel * bias_step, column_mask, COMPUTE)
        acc += tl.expand_dims(shift, OUT_DIM)
    row = m_tile * BLOCK_M + tl.arange(0, BLOCK_M).to(INDEX)
    ow = row % out_w
    rest_row = row // out_w
    oh = rest_row % out_h
    rest_row = rest_row // out_h
    od = rest_row % out_d
    item = rest_row // out_d
    out_rows = item * out_batch_step + od * out_d_step + oh * out_h_step
    out_rows += ow * out_w_step
    store_as(
        out
        + tl.expand_dims(out_rows, OUT_ROWS)
        + tl.expand_dims(out_channel * out_channel_step, OUT_DIM),
        acc,
        tl.expand_dims(row < positions, OUT_ROWS)
        & tl.expand_dims(column_mask, OUT_DIM),
    )


KERNEL = Kernel(convolution_kernel)


def _padded(values, fill, dims):
    """`values` (one per spatial dimension) as three, `fill` first."""
    return (fill,) * (3 - dims) + tuple(values)


def _position_dim(strides) -> int:
    """The dimension of a tile along which positions run, for a tensor of
    (batch, channel, depth, height, width) `strides`: 1 (the fastest) when
    its positions lie closer together than its channels (as in NCHW), else
    0 (channels last)."""
    return 1 if abs(strides[4]) <= abs(strides[1]) else 0


def _tiles(
    mode: int,
    dtype: str,
    positions: int,
    columns: int,
    reduction: int,
    positions_fast: bool,
):
    """`(BLOCK_M, BLOCK_N, BLOCK_K, warps)` for `positions` output positions,
    `columns` output channels a program row can cover (those of a group, or
    all for `DIRECT`) and `reduction` values of K per step (a tap's input
    channels for `CHANNEL_BLOCKS`, channels x taps for `FLAT`);
    `positions_fast`: whether the input's positions are its contiguous
    dimension."""
    if INTERPRETER:
        limit_m = INTERPRETER_DIRECT_BLOCK_M if mode == DIRECT else INTERPRETER_BLOCK_M
        limit_k = (
            INTERPRETER_CHANNEL_BLOCK if mode == CHANNEL_BLOCKS else INTERPRETER_BLOCK_K
        )
        block_m = min(max(next_power_of_two(positions), 16), limit_m)
        limit_n = INTERPRETER_DIRECT_BLOCK_N if mode == DIRECT else INTERPRETER_BLOCK_N
        block_n = min(max(next_power_of_two(columns), 16), limit_n)
        block_k = min(max(next_power_of_two(reduction), 16), limit_k)
        return block_m, block_n, block_k, 4
    if mode == DIRECT:
        # Multiply-adds in registers, 16 float32 (8 float64) partial sums
        # per thread. The contiguous dimension spans the warps' threads; the
        # other one stays short, since each thread holds all of its values
        # (and the offsets and masks along it).
        elements = 1024 if dtype == "float64" else 2048
        if positions_fast:
            block_n = min(next_power_of_two(columns), 8)
            return elements // block_n, block_n, 16, 4
        block_n = min(next_power_of_two(columns), 64)
        return elements // block_n, block_n, 16, 4
    block_m, block_n, block_k = PRODUCT_TILES[dtype]
    if mode == FLAT:
        block_k = FLAT_BLOCK_K
    block_n = min(block_n, max(next_power_of_two(columns), DOT_MINIMUM))
    block_k = min(block_k, max(next_power_of_two(reduction), DOT_MINIMUM))
    return block_m, block_n, block_k, 4


class AnyOverlap:
    """Whether `out` shares any memory with an input. Unlike `OverlapGuard`,
    an `out` that is an input element for element needs staging too: a
    program reads input values around its positions that other programs'
    outputs overwrite."""

    def __init__(self, out, inputs) -> None:
        self.out_span = span(out.shape, out.strides)
        self.out_size = out.element_size
        self.inputs = [(span(m.shape, m.strides), m.element_size) for m in inputs]

    def __call__(self, out, inputs) -> bool:
        address = out.data_ptr()
        return any(
            ranges_overlap(
                address, self.out_span, self.out_size, tensor.data_ptr(), extent, size
            )
            for tensor, (extent, size) in zip(inputs, self.inputs)
        )


class ConvolutionLaunch:
    """The planned convolution of a resolved `ConvolutionOperator` (its
    `__init__` has checked the arguments): call it as ``launch(stream,
    input, weight, bias, out)``."""

    def __init__(self, operator, input, weight, bias, out) -> None:
        dims = operator.spatial_dims
        groups = operator.groups
        in_per_group = operator.in_channels // groups
        out_per_group = operator.out_channels // groups
        self.device = operator.device
        output_size = _padded(operator.output_size, 1, dims)
        positions = operator.batch
        for size in output_size:
            positions *= size
        taps = 1
        for size in operator.kernel_size:
            taps *= size

        # Strides of each tensor, a batch stride of 0 for an unbatched one.
        input_strides = tuple(input.strides)
        out_strides = tuple(out.strides)
        if not operator.batched:
            input_strides = (0, *input_strides)
            out_strides = (0, *out_strides)
        input_strides = (
            *input_strides[:2],
            *_padded(input_strides[2:], 0, dims),
        )
        out_strides = (*out_strides[:2], *_padded(out_strides[2:], 0, dims))
        first, second, *kernel_strides = weight.strides
        kernel_strides = _padded(kernel_strides, 0, dims)
        if operator.transposed:
            # `weight` is (C_in, C_out / groups, *kernel).
            weight_steps = (second, in_per_group * first, first)
        else:
            # `weight` is (C_out, C_in / groups, *kernel).
            weight_steps = (first, out_per_group * first, second)

        dtype = input.dtype
        if in_per_group == 1:
            mode = DIRECT
            columns, reduction, groups_axis = operator.out_channels, taps, 1
        elif in_per_group >= CHANNEL_BLOCK_MINIMUM:
            mode = CHANNEL_BLOCKS
            columns, reduction, groups_axis = out_per_group, in_per_group, groups
        else:
            mode = FLAT
            columns, reduction = out_per_group, in_per_group * taps
            groups_axis = groups
        input_dim = _position_dim(input_strides)
        if mode == DIRECT and columns < DIRECT_CHANNELS_ACROSS_THREADS:
            # Too few channels to spread across a warp's threads.
            input_dim = 1
        block_m, block_n, block_k, warps = _tiles(
            mode, dtype, positions, columns, reduction, input_dim == 1
        )
        m_tiles = -(-positions // block_m)
        n_tiles = -(-columns // block_n)
        self.empty = positions == 0 or operator.out_channels == 0
        wide = dtype == "float64"
        # 32-bit offsets (half the registers of 64-bit ones) unless a tensor
        # reaches past them; a tile past the last position adds BLOCK_M.
        reach = max(
            span(meta.shape, meta.strides)
            for meta in (input, weight, out, bias)
            if meta is not None
        )
        long_offsets = max(reach, positions + block_m) >= INT32_LIMIT
        long_offsets = long_offsets or (INTERPRETER and INTERPRETER_LONG_OFFSETS)
        self.has_bias = bias is not None
        self._launch = KERNEL.bind(
            grid=(0 if self.empty else m_tiles * n_tiles * groups_axis,),
            arguments=(
                out,
                input,
                weight,
                bias if bias is not None else Pointer(dtype),
                positions,
                *output_size,
                *_padded(operator.input_size, 1, dims),
                *_padded(operator.kernel_size, 1, dims),
                *_padded(operator.stride, 1, dims),
                *_padded(operator.padding, 0, dims),
                *_padded(operator.dilation, 1, dims),
                in_per_group,
                out_per_group,
                operator.out_channels,
                m_tiles,
                n_tiles,
                *input_strides,
                *weight_steps,
                *kernel_strides,
                *out_strides,
                bias.strides[0] if bias is not None else 0,
            ),
            constexprs={
                "MODE": mode,
                "TRANSPOSED": operator.transposed,
                "HAS_BIAS": self.has_bias,
                # Tensor cores take 16-bit floats as they are; the
                # interpreter's bfloat16 arithmetic is wrong (its float16
                # products accumulate in float32, as on GPUs).
                "NATIVE": dtype == "float16"
                or (dtype == "bfloat16" and not INTERPRETER),
                "COMPUTE": tl.float64 if wide else tl.float32,
                "INDEX": tl.int64 if long_offsets else tl.int32,
                "INPUT_DIM": input_dim,
                "OUT_DIM": _position_dim(out_strides),
                "BLOCK_M": block_m,
                "BLOCK_N": block_n,
                "BLOCK_K": block_k,
            },
            device=self.device,
            num_warps=warps,
        )
        inputs = (input, weight) if bias is None else (input, weight, bias)
        self.overlap = AnyOverlap(out, inputs)

    def __call__(self, stream, input, weight, bias, out) -> None:
        if self.empty:
            return
        inputs = (input, weight) if bias is None else (input, weight, bias)
        # Without a bias the kernel's `bias` pointer is never read.
        bias_or_input = input if bias is None else bias
        if self.overlap(out, inputs):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, input, weight, bias_or_input)
                out.copy_(staging)
            return
        self._launch(stream, out, input, weight, bias_or_input)
