"""CUDA-like `reshape_and_cache` (slot 0, NVIDIA only, as in the original) in
Triton: vLLM's paged KV-cache write.

A program writes a tile of ``ROWS`` rows by the head: row ``r`` is head ``r
% heads`` of token ``r // heads``, and the token's slot (``slot_mapping``)
gives its block ``slot // block_size`` and offset ``slot % block_size``.
The rows are read contiguously along the head (128-bit loads when `key` and
`value` are); element `d` of a key row goes to ``key_cache[block, head, d //
x, offset, d % x]`` (runs of `x` elements, 16 bytes in vLLM's layouts, with
`x` a compile-time constant so that the stores vectorise) and of a value row
to ``value_cache[block, head, d, offset]``. Tokens with a negative slot are
skipped.

"auto" copies bit patterns; the fp8 modes divide by the scale in float32 and
round to nearest even into fp8 bytes, saturating to the largest finite
value, with `reshape_and_cache_flash`'s `fp8_bits`.

The slots are checked before the launch (one reduction and one transfer to
the host; the base's scan only runs for the message when one is bad): a bad
slot raises `ValueError` and nothing is written. Sources that overlap a
cache (a view into it) are copied first, since programs would otherwise
read what others write.

`write_rows` is the row writer of `paged_caching_infinilm` and
`kv_caching_infinilm` as well.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.reshape_and_cache import ReshapeAndCache
from infini.ops.core.geometry import ranges_overlap, span
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import bits_pointer, load_as
from infini.ops.native.cuda.ops.reshape_and_cache_flash import FP8_FORMATS, fp8_bits
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    require_device,
    staging_like,
)

# Elements of a program's tile (rows by the padded head). GPUs: 8 per thread
# of 4 warps (one 16-byte access of 16-bit data per tensor), which keeps
# the scattered stores' addresses and the fp8 conversion in registers, and
# gives every SM many programs. The interpreter runs each tile as NumPy
# steps and takes many rows at once.
GPU_TILE = 1024
INTERPRETER_TILE = 65536


def row_tile(rows: int, width: int) -> int:
    """Rows per program for `rows` rows padded to `width` columns."""
    tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
    return max(1, min(tile // width, next_power_of_two(rows)))


@triton.jit
def write_rows(
    cache,
    source,
    scale,
    source_rows,
    cache_rows,
    row_mask,
    source_columns,
    cache_columns,
    column_mask,
    FP8: tl.constexpr,
    MANTISSA: tl.constexpr,
    BIAS: tl.constexpr,
    MAX: tl.constexpr,
):
    """``cache[cache_rows + cache_columns] = source[source_rows +
    source_columns]`` over the rows and columns of the masks: bit patterns,
    or fp8 bytes of ``source / scale`` with `FP8`."""
    mask = row_mask[:, None] & column_mask[None, :]
    source_offset = source_rows[:, None] + source_columns[None, :]
    cache_offset = cache_rows[:, None] + cache_columns[None, :]
    if FP8:
        x = load_as(source + source_offset, mask, tl.float32) / tl.load(scale)
        tl.store(cache + cache_offset, fp8_bits(x, MANTISSA, BIAS, MAX), mask=mask)
    else:
        x = tl.load(bits_pointer(source) + source_offset, mask=mask)
        tl.store(bits_pointer(cache) + cache_offset, x, mask=mask)


@triton.jit
def reshape_and_cache_kernel(
    key_cache,
    value_cache,
    key,
    value,
    slot_mapping,
    k_scale,
    v_scale,
    rows,
    heads,
    head_size,
    block_size,
    slot_stride,
    key_stride0,
    key_stride1,
    key_step,
    value_stride0,
    value_stride1,
    value_step,
    key_cache_stride0,
    key_cache_stride1,
    key_cache_stride2,
    key_cache_stride3,
    key_cache_step,
    value_cache_stride0,
    value_cache_stride1,
    value_cache_stride2,
    value_cache_stride3,
    ROWS: tl.constexpr,
    D_BLOCK: tl.constexpr,
    X: tl.constexpr,
    PACKED: tl.constexpr,
    FP8: tl.constexpr,
    MANTISSA: tl.constexpr,
    BIAS: tl.constexpr,
    MAX: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    in_range = row < rows
    token = row // heads
    head = row % heads
    slot = tl.load(slot_mapping + token * slot_stride, mask=in_range, other=-1)
    slot = slot.to(tl.int64)
    row_mask = in_range & (slot >= 0)
    block = slot // block_size
    offset = slot % block_size
    column = tl.arange(0, D_BLOCK)
    column_mask = column < head_size
    if PACKED:
        # vLLM's layout: the `x` elements of a run are adjacent and the runs
        # of consecutive offsets follow each other. The offset stride spelled
        # as the constant `X` tells the compiler that runs start 16-byte
        # aligned, so that each is stored whole.
        key_offset = offset * X
    else:
        key_offset = offset * key_cache_stride3
    write_rows(
        key_cache,
        key,
        k_scale,
        token * key_stride0 + head * key_stride1,
        block * key_cache_stride0 + head * key_cache_stride1 + key_offset,
        row_mask,
        column * key_step,
        (column // X) * key_cache_stride2 + (column % X) * key_cache_step,
        column_mask,
        FP8,
        MANTISSA,
        BIAS,
        MAX,
    )
    write_rows(
        value_cache,
        value,
        v_scale,
        token * value_stride0 + head * value_stride1,
        block * value_cache_stride0
        + head * value_cache_stride1
        + offset * value_cache_stride3,
        row_mask,
        column * value_step,
        column * value_cache_stride2,
        column_mask,
        FP8,
        MANTISSA,
        BIAS,
        MAX,
    )


KERNEL = Kernel(reshape_and_cache_kernel)


class SourceGuard:
    """Whether a cache write's sources share memory with its caches (a
    source that is a view into a cache), in which case they are copied
    before the launch. Any shared byte counts, even at the same address and
    strides: a row is written at a position other than the one it is read
    from."""

    def __init__(self, caches, sources) -> None:
        self.caches = [(span(c.shape, c.strides), c.element_size) for c in caches]
        self.sources = [(span(s.shape, s.strides), s.element_size) for s in sources]

    def overlaps(self, caches, sources) -> bool:
        for cache, (cache_span, cache_size) in zip(caches, self.caches):
            for source, (source_span, source_size) in zip(sources, self.sources):
                if ranges_overlap(
                    cache.data_ptr(),
                    cache_span,
                    cache_size,
                    source.data_ptr(),
                    source_span,
                    source_size,
                ):
                    return True
        return False

    def __call__(self, device, stream, caches, sources):
        if not self.overlaps(caches, sources):
            return sources
        with stream_context(device, stream):
            # Copies with the sources' strides, which the launch was planned for.
            return tuple(staging_like(source).copy_(source) for source in sources)


def check_slots_fast(operator, slot_mapping) -> None:
    """The base's `check_slots` with a single synchronising transfer when
    every slot fits (the base scans for the first bad one only then)."""
    if slot_mapping.numel() and int(slot_mapping.max()) >= operator.slots:
        operator.check_slots(slot_mapping)


@implementation(
    operator="reshape_and_cache",
    devices=("nvidia",),
    slot=0,
)
class CudaReshapeAndCache(ReshapeAndCache):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        key, value = args.key, args.value
        key_cache, value_cache = args.key_cache, args.value_cache
        slot_mapping = args.slot_mapping
        tokens, heads, head_size = key.shape
        rows = tokens * heads
        width = max(next_power_of_two(head_size), 16)
        tile = row_tile(rows, width)
        x = key_cache.shape[4]
        mantissa, bias, largest = FP8_FORMATS.get(args.kv_cache_dtype, (0, 0, 0))
        scale = Pointer("float32")
        self.rows = rows
        self._launch = KERNEL.bind(
            grid=(-(-rows // tile),),
            arguments=(
                key_cache,
                value_cache,
                key,
                value,
                slot_mapping,
                args.k_scale if self.fp8 else scale,
                args.v_scale if self.fp8 else scale,
                rows,
                heads,
                head_size,
                self.block_size,
                slot_mapping.strides[0],
                *key.strides,
                *value.strides,
                *key_cache.strides,
                *value_cache.strides,
            ),
            constexprs={
                "ROWS": tile,
                "D_BLOCK": width,
                "X": x,
                "PACKED": key_cache.strides[3:] == (x, 1),
                "FP8": self.fp8,
                "MANTISSA": mantissa,
                "BIAS": bias,
                "MAX": largest,
            },
            device=self.device,
        )
        self.sources = SourceGuard((key_cache, value_cache), (key, value, slot_mapping))

    def launch(
        self, stream, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale
    ) -> None:
        if self.rows == 0:
            return
        with stream_context(self.device, stream):
            check_slots_fast(self, slot_mapping)
        caches = (key_cache, value_cache)
        key, value, slot_mapping = self.sources(
            self.device, stream, caches, (key, value, slot_mapping)
        )
        self._launch(
            stream, key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale
        )
