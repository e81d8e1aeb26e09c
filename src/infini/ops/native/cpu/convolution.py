"""Convolutions on the CPU: im2col and BLAS (`blas.matmul_into`), shared by `conv1d`,
`conv2d`, `conv3d`, `convolution` and `conv_infinilm`.

Every convolution is planned as a 3-d one: missing leading spatial
dimensions have size 1 (kernel 1, stride 1, no padding). Three ways run it:

- GEMM: an im2col kernel gathers, for a tile of the output, the input values
  each kernel tap reads (zeros where it reads padding) into a
  ``(C_in * K, positions)`` matrix, widened to the compute type; each group
  is then one matrix product ``weight_g @ columns_g``. A 1x1 convolution
  with stride 1 and no padding on a float32/float64 input whose spatial
  dimensions are packed skips the gather: the input already is that
  matrix. The product lands in `out` when BLAS can write it (float32/float64,
  packed spatial dimensions), else in a scratch tile that a store kernel
  adds the bias to, rounds and writes.
- Depthwise (one input channel per group): a direct kernel, one output
  plane per task; a GEMM per channel would be all overhead.
- Transposed: per group ``columns = weight_g.T @ input_g``, then a col2im
  kernel scatters and sums the columns into each output plane, adds the
  bias and writes it.

16-bit floats are computed in float32 and rounded once, float64 in float64.

The kernels that run between matrix products (gather, store, scatter) are
serial: BLAS's threads keep spinning for a while after a product and
Numba's keep spinning after a parallel loop, so alternating the two thread
pools costs far more (tens of milliseconds a switch on two cores) than the
second core would save. The depthwise kernel, which calls no BLAS, is
parallel.
Tiles are sized to keep the gathered columns cache-sized. When `out` shares
memory with an input, the input is copied first, so any aliasing is safe.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from infini.ops.core.geometry import span

from .blas import HostView, compute_type, matmul_into
from .dtype_io import loader, storer
from .jit import kernel
from .memory import STORAGE, element_array

# Bytes of gathered columns (and scratch output) per tile: large enough for
# BLAS to run at full speed, small enough to stay in the cache between the
# gather and the product.
TILE_BYTES = 4 << 20

# Multiply-adds from which the depthwise kernel runs in parallel: below,
# waking the threads costs more than it saves.
PARALLEL_DEPTHWISE_WORK = 1 << 18

# Parallel tasks of the depthwise kernel: each takes a run of output planes
# (and allocates its line buffer once).
DEPTHWISE_CHUNKS = 64


def _geometry(channels, kernel_size, stride, padding, dilation, input_size, output):
    """The int64 array every kernel takes: channels, then kernel size,
    stride, padding, dilation, input size and output size (3 each)."""
    return np.array(
        (
            channels,
            *kernel_size,
            *stride,
            *padding,
            *dilation,
            *input_size,
            *output,
        ),
        dtype=np.int64,
    )


@cache
def gather_kernel(dtype: str, compute: str):
    """im2col: ``run(x_address, x_span, x_strides, geometry, columns,
    first_item, first_row)`` fills ``columns[item, channel * K + tap,
    position]`` for the output rows ``first_row ...`` (a row is one line of
    the last spatial dimension) of the items ``first_item ...``."""
    storage = STORAGE[dtype]
    load = loader(dtype)
    zero = getattr(np, compute)(0)

    @kernel
    def run(x_address, x_span, x_strides, geometry, columns, first_item, first_row):
        x = element_array(x_address, x_span, storage)
        kernel_h, kernel_w = geometry[2], geometry[3]
        taps = geometry[1] * kernel_h * kernel_w
        stride_d, stride_h, stride_w = geometry[4], geometry[5], geometry[6]
        pad_d, pad_h, pad_w = geometry[7], geometry[8], geometry[9]
        dilation_d, dilation_h, dilation_w = geometry[10], geometry[11], geometry[12]
        in_d, in_h, in_w = geometry[13], geometry[14], geometry[15]
        out_h, out_w = geometry[17], geometry[18]
        items, rows, length = columns.shape
        lines = length // out_w
        for task in range(items * rows):
            item = task // rows
            row = task - item * rows
            channel = row // taps
            tap = row - channel * taps
            tap_d = tap // (kernel_h * kernel_w)
            tap_h = (tap // kernel_w) % kernel_h
            tap_w = tap % kernel_w
            base = (first_item + item) * x_strides[0] + channel * x_strides[1]
            # Output columns `low <= ow < high` read inside the input.
            offset_w = tap_w * dilation_w - pad_w
            low = 0 if offset_w >= 0 else (stride_w - 1 - offset_w) // stride_w
            high = 0
            if in_w - 1 - offset_w >= 0:
                high = min(out_w, (in_w - 1 - offset_w) // stride_w + 1)
            low = min(low, high)
            line = columns[item, row]
            for index in range(lines):
                position = first_row + index
                od = position // out_h
                oh = position - od * out_h
                source_d = od * stride_d - pad_d + tap_d * dilation_d
                source_h = oh * stride_h - pad_h + tap_h * dilation_h
                # Loops index slices from zero (Numba then skips its
                # negative-index test and LLVM vectorises them).
                segment = line[index * out_w : (index + 1) * out_w]
                if source_d < 0 or source_d >= in_d or source_h < 0 or source_h >= in_h:
                    segment[:] = zero
                    continue
                source = (
                    base
                    + source_d * x_strides[2]
                    + source_h * x_strides[3]
                    + offset_w * x_strides[4]
                )
                step = stride_w * x_strides[4]
                segment[:low] = zero
                segment[high:] = zero
                inside = segment[low:high]
                if step == 1:
                    values = x[source + low : source + high]
                    for ow in range(high - low):
                        inside[ow] = load(values, ow)
                else:
                    first = np.uint64(source + low * step)
                    stride = np.uint64(step)
                    for ow in range(high - low):
                        inside[ow] = load(x, first + np.uint64(ow) * stride)
        return 0

    return run


@cache
def store_kernel(dtype: str):
    """``run(out_address, out_span, out_strides, geometry, source, bias,
    has_bias, first_item, first_row)``: writes ``source[item, channel,
    position]`` (+ ``bias[channel]``) into `out` at the output rows
    ``first_row ...`` of the items ``first_item ...``, rounding once."""
    storage = STORAGE[dtype]
    store = storer(dtype, "float64" if dtype == "float64" else "float32")

    @kernel
    def run(
        out_address,
        out_span,
        out_strides,
        geometry,
        source,
        bias,
        has_bias,
        first_item,
        first_row,
    ):
        out = element_array(out_address, out_span, storage)
        out_h, out_w = geometry[17], geometry[18]
        items, channels, length = source.shape
        lines = length // out_w
        for task in range(items * channels):
            item = task // channels
            channel = task - item * channels
            # Without a bias, `bias` holds one zero.
            shift = bias[channel if has_bias else 0]
            base = (first_item + item) * out_strides[0] + channel * out_strides[1]
            line = source[item, channel]
            for index in range(lines):
                position = first_row + index
                od = position // out_h
                oh = position - od * out_h
                target = base + od * out_strides[2] + oh * out_strides[3]
                values = line[index * out_w : (index + 1) * out_w]
                if out_strides[4] == 1:
                    row = out[target : target + out_w]
                    for ow in range(out_w):
                        store(row, ow, values[ow] + shift)
                else:
                    first = np.uint64(target)
                    step = np.uint64(out_strides[4])
                    for ow in range(out_w):
                        store(out, first + np.uint64(ow) * step, values[ow] + shift)
        return 0

    return run


@cache
def depthwise_kernel(dtype: str, compute: str, parallel: bool):
    """``run(x_address, x_span, x_strides, out_address, out_span,
    out_strides, geometry, weight, bias, has_bias, multiplier, items)``: a
    convolution with one input channel per group, straight into `out`;
    `weight` is ``(C_out, K)`` in the compute type and output channel ``c``
    reads input channel ``c // multiplier``. `parallel`: over runs of
    output planes (else one thread, for small convolutions, where waking
    the threads would cost more than the work)."""
    storage = STORAGE[dtype]
    load = loader(dtype)
    store = storer(dtype, compute)
    line_type = getattr(np, compute)
    zero = line_type(0)

    @kernel(parallel=parallel)
    def run(
        x_address,
        x_span,
        x_strides,
        out_address,
        out_span,
        out_strides,
        geometry,
        weight,
        bias,
        has_bias,
        multiplier,
        items,
    ):
        x = element_array(x_address, x_span, storage)
        out = element_array(out_address, out_span, storage)
        kernel_d, kernel_h, kernel_w = geometry[1], geometry[2], geometry[3]
        stride_d, stride_h, stride_w = geometry[4], geometry[5], geometry[6]
        pad_d, pad_h, pad_w = geometry[7], geometry[8], geometry[9]
        dilation_d, dilation_h, dilation_w = geometry[10], geometry[11], geometry[12]
        in_d, in_h, in_w = geometry[13], geometry[14], geometry[15]
        out_d, out_h, out_w = geometry[16], geometry[17], geometry[18]
        channels = weight.shape[0]
        tasks = items * channels
        chunks = min(tasks, DEPTHWISE_CHUNKS)
        for chunk in prange(chunks):
            # One output line at a time, tap by tap: the loop over the line
            # has no bounds checks and vectorises.
            line = np.empty(out_w, line_type)
            for task in range(chunk * tasks // chunks, (chunk + 1) * tasks // chunks):
                item = task // channels
                channel = task - item * channels
                taps = weight[channel]
                start = zero
                if has_bias:
                    start = bias[channel]
                source = item * x_strides[0] + (channel // multiplier) * x_strides[1]
                target = item * out_strides[0] + channel * out_strides[1]
                for od in range(out_d):
                    for oh in range(out_h):
                        line[:] = start
                        for td in range(kernel_d):
                            source_d = od * stride_d - pad_d + td * dilation_d
                            if source_d < 0 or source_d >= in_d:
                                continue
                            for th in range(kernel_h):
                                source_h = oh * stride_h - pad_h + th * dilation_h
                                if source_h < 0 or source_h >= in_h:
                                    continue
                                row = source + source_d * x_strides[2]
                                row += source_h * x_strides[3]
                                tap = (td * kernel_h + th) * kernel_w
                                for tw in range(kernel_w):
                                    value = taps[tap + tw]
                                    offset_w = tw * dilation_w - pad_w
                                    # Output columns `low <= ow < high` read
                                    # inside the input.
                                    low = 0
                                    if offset_w < 0:
                                        low = (stride_w - 1 - offset_w) // stride_w
                                    high = 0
                                    if in_w - 1 - offset_w >= 0:
                                        high = (in_w - 1 - offset_w) // stride_w + 1
                                        high = min(out_w, high)
                                    if high <= low:
                                        continue
                                    # Slices indexed from zero: no
                                    # negative-index test, vectorised.
                                    count = high - low
                                    sums = line[low:high]
                                    first = low * stride_w + offset_w
                                    first = row + first * x_strides[4]
                                    step = stride_w * x_strides[4]
                                    if step == 1:
                                        values = x[first : first + count]
                                        for ow in range(count):
                                            sums[ow] += value * load(values, ow)
                                    else:
                                        base = np.uint64(first)
                                        stride = np.uint64(step)
                                        for ow in range(count):
                                            index = base + np.uint64(ow) * stride
                                            sums[ow] += value * load(x, index)
                        target_row = target + od * out_strides[2]
                        target_row += oh * out_strides[3]
                        if out_strides[4] == 1:
                            outputs = out[target_row : target_row + out_w]
                            for ow in range(out_w):
                                store(outputs, ow, line[ow])
                        else:
                            base = np.uint64(target_row)
                            stride = np.uint64(out_strides[4])
                            for ow in range(out_w):
                                store(out, base + np.uint64(ow) * stride, line[ow])
        return 0

    return run


@cache
def scatter_kernel(dtype: str, compute: str):
    """col2im for transposed convolutions: ``run(columns, out_address,
    out_span, out_strides, geometry, bias, has_bias, first_item)`` sums
    ``columns[item, channel * K + tap, input position]`` into the output
    plane of each (item, channel), adds the bias and writes the plane."""
    storage = STORAGE[dtype]
    store = storer(dtype, compute)
    plane_type = getattr(np, compute)

    @kernel
    def run(
        columns,
        out_address,
        out_span,
        out_strides,
        geometry,
        bias,
        has_bias,
        first_item,
    ):
        out = element_array(out_address, out_span, storage)
        kernel_d, kernel_h, kernel_w = geometry[1], geometry[2], geometry[3]
        taps = kernel_d * kernel_h * kernel_w
        stride_d, stride_h, stride_w = geometry[4], geometry[5], geometry[6]
        pad_d, pad_h, pad_w = geometry[7], geometry[8], geometry[9]
        dilation_d, dilation_h, dilation_w = geometry[10], geometry[11], geometry[12]
        in_d, in_h, in_w = geometry[13], geometry[14], geometry[15]
        out_d, out_h, out_w = geometry[16], geometry[17], geometry[18]
        items, rows, _ = columns.shape
        channels = rows // taps
        for task in range(items * channels):
            item = task // channels
            channel = task - item * channels
            plane = np.zeros(out_d * out_h * out_w, plane_type)
            for tap in range(taps):
                tap_d = tap // (kernel_h * kernel_w)
                tap_h = (tap // kernel_w) % kernel_h
                tap_w = tap % kernel_w
                line = columns[item, channel * taps + tap]
                offset_w = tap_w * dilation_w - pad_w
                # Input columns `low <= source_w < high` land inside the output.
                low = 0 if offset_w >= 0 else (stride_w - 1 - offset_w) // stride_w
                high = 0
                if out_w - 1 - offset_w >= 0:
                    high = min(in_w, (out_w - 1 - offset_w) // stride_w + 1)
                for source_d in range(in_d):
                    od = source_d * stride_d - pad_d + tap_d * dilation_d
                    if od < 0 or od >= out_d:
                        continue
                    for source_h in range(in_h):
                        oh = source_h * stride_h - pad_h + tap_h * dilation_h
                        if oh < 0 or oh >= out_h:
                            continue
                        if high <= low:
                            continue
                        # Slices indexed from zero: no negative-index test.
                        target = (od * out_h + oh) * out_w + offset_w
                        target += low * stride_w
                        source = (source_d * in_h + source_h) * in_w
                        count = high - low
                        sums = plane[target : target + (count - 1) * stride_w + 1]
                        values = line[source + low : source + high]
                        if stride_w == 1:
                            for index in range(count):
                                sums[index] += values[index]
                        else:
                            for index in range(count):
                                sums[index * stride_w] += values[index]
            shift = bias[channel if has_bias else 0]
            base = (first_item + item) * out_strides[0] + channel * out_strides[1]
            for od in range(out_d):
                for oh in range(out_h):
                    row = base + od * out_strides[2] + oh * out_strides[3]
                    offset = (od * out_h + oh) * out_w
                    for ow in range(out_w):
                        value = plane[offset + ow]
                        if has_bias:
                            value += shift
                        store(out, row + ow * out_strides[4], value)
        return 0

    return run


def _as_3d(values, dims: int, fill: int) -> tuple[int, ...]:
    return (fill,) * (3 - dims) + tuple(values)


def _layout(meta, batched: bool, dims: int):
    """Shape and strides of a tensor as ``(N, C, D, H, W)``."""
    shape, strides = tuple(meta.shape), tuple(meta.strides)
    if not batched:
        shape, strides = (1, *shape), (0, *strides)
    pad = 3 - dims
    shape = shape[:2] + (1,) * pad + shape[2:]
    strides = strides[:2] + (0,) * pad + strides[2:]
    return shape, strides


def _packed_positions(shape, strides) -> bool:
    """Whether the spatial dimensions of a ``(N, C, D, H, W)`` layout are
    one unit-stride run (positions ``0 ..`` at stride 1)."""
    expected = 1
    for size, stride in zip(reversed(shape[2:]), reversed(strides[2:]), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _matrix_view(shape, strides, groups: int, dtype: str) -> HostView | None:
    """A ``(N, groups, C / groups, positions)`` view of a tensor whose
    positions are packed, if BLAS can read or write each
    ``(C / groups, positions)`` matrix in place (else `None`)."""
    if not _packed_positions(shape, strides):
        return None
    batch, channels = shape[:2]
    positions = shape[2] * shape[3] * shape[4]
    per_group = channels // groups
    if per_group > 1 and positions > 1 and strides[1] < positions:
        return None
    return HostView(
        (batch, groups, per_group, positions),
        (strides[0], per_group * strides[1], strides[1], 1),
        dtype,
    )


class ConvolutionPlan:
    """Runs one convolution geometry (`operator`, a resolved
    `ConvolutionOperator`) on the addresses of each call."""

    def __init__(self, operator, input, weight, bias, out) -> None:
        dims = operator.spatial_dims
        batched = operator.batched
        self.dtype = dtype = input.dtype
        self.compute = compute = compute_type(dtype)
        self.compute_name = compute.name
        self.native = dtype in ("float32", "float64")
        self.groups = groups = operator.groups
        self.batch = operator.batch
        self.in_channels = operator.in_channels
        self.out_channels = operator.out_channels
        self.transposed = operator.transposed
        self.x_shape, self.x_strides = _layout(input, batched, dims)
        self.out_shape, self.out_strides = _layout(out, batched, dims)
        self.x_span = span(self.x_shape, self.x_strides)
        self.out_span = span(self.out_shape, self.out_strides)
        self.x_strides_array = np.array(self.x_strides, dtype=np.int64)
        self.out_strides_array = np.array(self.out_strides, dtype=np.int64)
        contiguous = np.cumprod((1, *self.x_shape[::-1]))[-2::-1]
        self.x_snapshot_strides = np.array(contiguous, dtype=np.int64)
        self.x_view = HostView(self.x_shape, self.x_strides, dtype)
        self.out_view = HostView(self.out_shape, self.out_strides, dtype)
        self.weight_view = HostView(weight.shape, weight.strides, dtype)
        self.bias_view = (
            None if bias is None else HostView(bias.shape, bias.strides, dtype)
        )
        self.kernel_size = _as_3d(operator.kernel_size, dims, 1)
        self.taps = int(np.prod(self.kernel_size))
        self.input_size = self.x_shape[2:]
        self.output_size = self.out_shape[2:]
        self.positions = int(np.prod(self.output_size))
        self.geometry = _geometry(
            operator.in_channels,
            self.kernel_size,
            _as_3d(operator.stride, dims, 1),
            _as_3d(operator.padding, dims, 0),
            _as_3d(operator.dilation, dims, 1),
            self.input_size,
            self.output_size,
        )
        self.no_bias = np.zeros(1, compute)
        self.empty = self.out_view.empty
        self.itemsize = compute.itemsize
        self.store = None
        if self.transposed:
            self._plan_transposed()
        elif self.in_channels == groups and groups > 1:
            self.mode = "depthwise"
            work = self.positions * self.taps * self.out_channels * self.batch
            self.depthwise = depthwise_kernel(
                dtype, self.compute_name, work >= PARALLEL_DEPTHWISE_WORK
            )
        else:
            self._plan_gemm(operator)

    # Planning.

    def _plan_gemm(self, operator) -> None:
        self.mode = "gemm"
        groups = self.groups
        out_w = self.output_size[2]
        rows = self.positions // out_w
        unit = all(s == 1 for s in operator.stride) and not any(operator.padding)
        self.x_matrix = (
            _matrix_view(self.x_shape, self.x_strides, groups, self.dtype)
            if self.native and self.taps == 1 and unit
            else None
        )
        self.out_matrix = (
            _matrix_view(self.out_shape, self.out_strides, groups, self.dtype)
            if self.native
            else None
        )
        self.gather = gather_kernel(self.dtype, self.compute_name)
        if self.out_matrix is None:
            self.store = store_kernel(self.dtype)
        # Bytes per output row of one item: its gathered columns and scratch.
        column_rows = self.in_channels * self.taps
        per_row = (
            (column_rows + (self.out_channels if self.out_matrix is None else 0))
            * out_w
            * self.itemsize
        )
        self.tiles = self._tiles(rows, per_row)

    def _plan_transposed(self) -> None:
        self.mode = "transposed"
        self.x_matrix = (
            _matrix_view(self.x_shape, self.x_strides, self.groups, self.dtype)
            if self.native
            else None
        )
        self.gather = gather_kernel(self.dtype, self.compute_name)
        self.scatter = scatter_kernel(self.dtype, self.compute_name)
        # The input read as it is: kernel 1, stride 1, no padding.
        self.identity_geometry = _geometry(
            self.in_channels,
            (1, 1, 1),
            (1, 1, 1),
            (0, 0, 0),
            (1, 1, 1),
            self.input_size,
            self.input_size,
        )
        in_positions = int(np.prod(self.input_size))
        per_item = (
            (self.out_channels * self.taps + self.in_channels)
            * in_positions
            * self.itemsize
        )
        self.tiles = self._tiles(1, per_item)

    def _tiles(self, rows: int, per_row: int) -> list[tuple[int, int, int, int]]:
        """(first item, items, first row, rows) of each tile: whole items
        while one fits the budget, else rows of one item."""
        batch = self.batch
        per_item = max(1, rows * per_row)
        if per_item <= TILE_BYTES:
            step = max(1, TILE_BYTES // per_item)
            return [
                (first, min(step, batch - first), 0, rows)
                for first in range(0, batch, step)
            ]
        step = max(1, TILE_BYTES // max(1, per_row))
        return [
            (item, 1, first, min(step, rows - first))
            for item in range(batch)
            for first in range(0, rows, step)
        ]

    def _buffer(self, name: str, count: int) -> np.ndarray:
        """A flat scratch array of at least `count` elements, kept between
        calls (operators are cached per thread)."""
        buffer = getattr(self, name, None)
        if buffer is None or buffer.size < count:
            buffer = np.empty(count, self.compute)
            setattr(self, name, buffer)
        return buffer[:count]

    # Running.

    def run(self, input, weight, bias, out) -> None:
        if self.empty:
            return
        x_address = input.data_ptr()
        out_address = out.data_ptr()
        weight_address = weight.data_ptr()
        bias_address = 0 if bias is None else bias.data_ptr()
        aliased = self.out_view.overlaps(out_address, self.x_view, x_address) or (
            self.out_view.overlaps(out_address, self.weight_view, weight_address)
        )
        if self.bias_view is not None:
            aliased = aliased or self.out_view.overlaps(
                out_address, self.bias_view, bias_address
            )
        weights = self.weight_view.load(weight_address, self.compute)
        if self.bias_view is None:
            bias_values, has_bias = self.no_bias, False
        else:
            bias_values = np.ascontiguousarray(
                self.bias_view.load(bias_address, self.compute)
            )
            has_bias = True
        x_strides = self.x_strides_array
        snapshot = None
        if aliased:
            # `out` shares memory with an input: read the inputs from copies.
            snapshot = np.array(self.x_view.raw(x_address))
            x_address = snapshot.ctypes.data
            x_strides = self.x_snapshot_strides
            weights = np.array(weights)
            bias_values = np.array(bias_values)
        if self.mode == "gemm":
            self._run_gemm(
                x_address,
                x_strides,
                weights,
                bias_values,
                has_bias,
                out_address,
                direct_input=snapshot is None,
            )
        elif self.mode == "depthwise":
            self.depthwise(
                x_address,
                self.x_span,
                x_strides,
                out_address,
                self.out_span,
                self.out_strides_array,
                self.geometry,
                np.ascontiguousarray(weights.reshape(self.out_channels, self.taps)),
                bias_values,
                has_bias,
                self.out_channels // self.in_channels,
                self.batch,
            )
        else:
            self._run_transposed(
                x_address,
                x_strides,
                weights,
                bias_values,
                has_bias,
                out_address,
                direct_input=snapshot is None,
            )

    def _run_gemm(
        self, x_address, x_strides, weights, bias, has_bias, out_address, direct_input
    ):
        groups = self.groups
        out_w = self.output_size[2]
        column_rows = self.in_channels * self.taps
        per_group = column_rows // groups
        weights = weights.reshape(groups, self.out_channels // groups, per_group)
        x_matrix = (
            self.x_matrix.raw(x_address)
            if direct_input and self.x_matrix is not None
            else None
        )
        out_matrix = (
            None if self.out_matrix is None else self.out_matrix.raw(out_address)
        )
        if out_matrix is not None and has_bias:
            bias_column = bias.reshape(groups, -1, 1)
        for first_item, items, first_row, rows in self.tiles:
            length = rows * out_w
            start = first_row * out_w
            if x_matrix is not None:
                columns = x_matrix[
                    first_item : first_item + items, :, :, start : start + length
                ]
            else:
                buffer = self._buffer("_columns", items * column_rows * length).reshape(
                    items, column_rows, length
                )
                self.gather(
                    x_address,
                    self.x_span,
                    x_strides,
                    self.geometry,
                    buffer,
                    first_item,
                    first_row,
                )
                columns = buffer.reshape(items, groups, per_group, length)
            if out_matrix is not None:
                target = out_matrix[
                    first_item : first_item + items, :, :, start : start + length
                ]
            else:
                target = self._buffer(
                    "_scratch", items * self.out_channels * length
                ).reshape(items, groups, -1, length)
            for group in range(groups):
                matmul_into(weights[group], columns[:, group], target[:, group])
            if out_matrix is not None:
                if has_bias:
                    np.add(target, bias_column, out=target)
            else:
                self.store(
                    out_address,
                    self.out_span,
                    self.out_strides_array,
                    self.geometry,
                    target.reshape(items, self.out_channels, length),
                    bias,
                    has_bias,
                    first_item,
                    first_row,
                )

    def _run_transposed(
        self, x_address, x_strides, weights, bias, has_bias, out_address, direct_input
    ):
        groups = self.groups
        in_per_group = self.in_channels // groups
        column_rows = self.out_channels * self.taps
        in_positions = int(np.prod(self.input_size))
        # `weight` is ``(C_in, C_out / groups, *kernel)``: group `g` maps its
        # input channels to ``C_out / groups * K`` column rows.
        weights = weights.reshape(groups, in_per_group, column_rows // groups)
        x_matrix = (
            self.x_matrix.raw(x_address)
            if direct_input and self.x_matrix is not None
            else None
        )
        for first_item, items, _, _ in self.tiles:
            if x_matrix is not None:
                source = x_matrix[first_item : first_item + items]
            else:
                gathered = self._buffer(
                    "_input", items * self.in_channels * in_positions
                ).reshape(items, self.in_channels, in_positions)
                self.gather(
                    x_address,
                    self.x_span,
                    x_strides,
                    self.identity_geometry,
                    gathered,
                    first_item,
                    0,
                )
                source = gathered.reshape(items, groups, in_per_group, in_positions)
            columns = self._buffer(
                "_columns", items * column_rows * in_positions
            ).reshape(items, groups, column_rows // groups, in_positions)
            for group in range(groups):
                matmul_into(weights[group].T, source[:, group], columns[:, group])
            self.scatter(
                columns.reshape(items, column_rows, in_positions),
                out_address,
                self.out_span,
                self.out_strides_array,
                self.geometry,
                bias,
                has_bias,
                first_item,
            )


def _call(operator: str, *, transposed=False, output_padding=(0,), **arguments):
    """Calls `infini.ops.<operator>` with the arguments in its order."""
    import infini.ops

    function = getattr(infini.ops, operator)
    a = arguments
    head = (a["input"], a["weight"], a["bias"])
    if operator == "conv_infinilm":
        tail = (a["padding"], a["stride"], a["dilation"], a["groups"])
    elif operator == "convolution":
        tail = (a["stride"], a["padding"], a["dilation"], transposed)
        tail += (list(output_padding), a["groups"])
    else:
        tail = (a["stride"], a["padding"], a["dilation"], a["groups"])
    function(*head, *tail, a["out"], implementation_index=0)


def precompile_convolution(operator: str, dims: int) -> int:
    """Runs `infini.ops.<operator>` once per precompiled dtype on each path
    (gathered GEMM into a strided output, which takes the store kernel;
    depthwise, small and large; and for `convolution`, transposed),
    compiling those kernels; returns the number of calls."""
    import torch

    from .precompile import PRECOMPILED_DTYPES

    calls = 0
    spatial = (6,) * dims
    for name in PRECOMPILED_DTYPES:
        dtype = getattr(torch, name)
        x = torch.zeros((1, 4, *spatial), dtype=dtype)
        bias = torch.zeros(4, dtype=dtype)
        # Every other element: BLAS cannot write it, the store kernel does.
        out = torch.empty((1, 4, *spatial[:-1], 12), dtype=dtype)[..., ::2]
        for groups in (1, 4):
            weight = torch.zeros((4, 4 // groups, *(3,) * dims), dtype=dtype)
            _call(
                operator,
                input=x,
                weight=weight,
                bias=bias,
                stride=[1],
                padding=[1],
                dilation=[1],
                groups=groups,
                out=out,
            )
            calls += 1
        # A depthwise convolution large enough to take the parallel kernel.
        size = (4096, 64, 16)[dims - 1]
        x_large = torch.zeros((1, 64, *(size,) * dims), dtype=dtype)
        _call(
            operator,
            input=x_large,
            weight=torch.zeros((64, 1, *(3,) * dims), dtype=dtype),
            bias=None,
            stride=[1],
            padding=[1],
            dilation=[1],
            groups=64,
            out=torch.empty_like(x_large),
        )
        calls += 1
        if operator == "convolution":
            weight = torch.zeros((4, 2, *(3,) * dims), dtype=dtype)
            out = torch.empty((1, 4, *(12,) * dims), dtype=dtype)
            _call(
                operator,
                input=x,
                weight=weight,
                bias=bias,
                stride=[2],
                padding=[1],
                dilation=[1],
                groups=2,
                out=out,
                transposed=True,
                output_padding=[1],
            )
            calls += 1
    return calls
