"""CUDA-like `reshape_and_cache_flash` (slot 0) in Triton.

A program writes a tile of tokens by a chunk of their ``heads * head_size``
elements into ``cache[slot // block_size, slot % block_size]``, keys and
values alike; tokens with a negative slot are skipped. The slots are checked
against the cache before the launch (`check_slots`, a scan on the device:
a bad slot raises `ValueError` and nothing is written).

"auto" copies bit patterns; the fp8 modes divide by the scale in float32
and round to nearest even into fp8 bytes, saturating to the largest finite
value as vLLM's CUDA kernels do (`fp8_bits`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.reshape_and_cache_flash import ReshapeAndCacheFlash
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import bits_pointer, load_as
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    require_device,
)

# fp8 formats: (mantissa bits, exponent bias, largest finite byte).
FP8_FORMATS = {
    "fp8": (3, 7, 0x7E),
    "fp8_e4m3": (3, 7, 0x7E),
    "fp8_e5m2": (2, 15, 0x7B),
}

# Elements per program: a token's heads on GPUs (up to the limit); many
# tokens per program under the interpreter, which runs it as NumPy steps.
GPU_BLOCK_LIMIT = 4096
INTERPRETER_TILE = 65536


@triton.jit
def fp8_bits(value, MANTISSA: tl.constexpr, BIAS: tl.constexpr, MAX: tl.constexpr):
    """float32 `value` as an fp8 byte (uint8): round to nearest even,
    magnitudes past the largest finite value (`MAX`) and infinities saturate
    to it, NaN becomes ``0x7F`` (with the sign)."""
    bits = value.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    magnitude = bits & 0x7FFFFFFF
    exponent = (magnitude >> 23).to(tl.int32) - 127
    # Subnormal in fp8 (or zero): a multiple of 2^(1 - bias - mantissa),
    # rounded half to even by adding and removing 2^23.
    scaled = tl.abs(value) * tl.exp2((BIAS - 1 + MANTISSA) * 1.0)
    rounded = (scaled + 8388608.0) - 8388608.0
    small = rounded.to(tl.uint32)
    drop: tl.constexpr = 23 - MANTISSA
    half = (magnitude >> drop) & 1
    normal = (magnitude + ((1 << (drop - 1)) - 1) + half) >> drop
    normal = normal - ((127 - BIAS) << MANTISSA)
    normal = tl.where((exponent > 15 + BIAS) | (normal > MAX), MAX, normal)
    result = tl.where(exponent < 1 - BIAS, small, normal)
    result = tl.where(magnitude > 0x7F800000, 0x7F, result)
    return (sign | result).to(tl.uint8)


@triton.jit
def write_tokens(
    cache,
    source,
    scale,
    token,
    token_mask,
    block,
    offset,
    elements,
    head_size,
    source_token_stride,
    source_head_stride,
    source_step,
    cache_block_stride,
    cache_offset_stride,
    cache_head_stride,
    cache_step,
    BLOCK: tl.constexpr,
    FP8: tl.constexpr,
    MANTISSA: tl.constexpr,
    BIAS: tl.constexpr,
    MAX: tl.constexpr,
):
    index = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = token_mask & (index < elements)
    head = index // head_size
    column = index % head_size
    source_offset = (
        token * source_token_stride + head * source_head_stride + column * source_step
    )
    cache_offset = (
        block * cache_block_stride
        + offset * cache_offset_stride
        + head * cache_head_stride
        + column * cache_step
    )
    if FP8:
        x = load_as(source + source_offset, mask, tl.float32)
        x = x / tl.load(scale)
        tl.store(cache + cache_offset, fp8_bits(x, MANTISSA, BIAS, MAX), mask=mask)
    else:
        x = tl.load(bits_pointer(source) + source_offset, mask=mask)
        tl.store(bits_pointer(cache) + cache_offset, x, mask=mask)


@triton.jit
def reshape_and_cache_flash_kernel(
    key_cache,
    value_cache,
    key,
    value,
    slot_mapping,
    k_scale,
    v_scale,
    count,
    block_size,
    heads,
    key_head_size,
    value_head_size,
    slot_stride,
    key_stride0,
    key_stride1,
    key_stride2,
    value_stride0,
    value_stride1,
    value_stride2,
    key_cache_stride0,
    key_cache_stride1,
    key_cache_stride2,
    key_cache_stride3,
    value_cache_stride0,
    value_cache_stride1,
    value_cache_stride2,
    value_cache_stride3,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    FP8: tl.constexpr,
    MANTISSA: tl.constexpr,
    BIAS: tl.constexpr,
    MAX: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    in_range = token < count
    slot = tl.load(slot_mapping + token * slot_stride, mask=in_range, other=-1)
    slot = slot.to(tl.int64)
    token_mask = (in_range & (slot >= 0))[:, None]
    slot = tl.maximum(slot, 0)
    block = (slot // block_size)[:, None]
    offset = (slot % block_size)[:, None]
    token = token[:, None]
    write_tokens(
        key_cache,
        key,
        k_scale,
        token,
        token_mask,
        block,
        offset,
        heads * key_head_size,
        key_head_size,
        key_stride0,
        key_stride1,
        key_stride2,
        key_cache_stride0,
        key_cache_stride1,
        key_cache_stride2,
        key_cache_stride3,
        BLOCK,
        FP8,
        MANTISSA,
        BIAS,
        MAX,
    )
    write_tokens(
        value_cache,
        value,
        v_scale,
        token,
        token_mask,
        block,
        offset,
        heads * value_head_size,
        value_head_size,
        value_stride0,
        value_stride1,
        value_stride2,
        value_cache_stride0,
        value_cache_stride1,
        value_cache_stride2,
        value_cache_stride3,
        BLOCK,
        FP8,
        MANTISSA,
        BIAS,
        MAX,
    )


KERNEL = Kernel(reshape_and_cache_flash_kernel)


@implementation(
    operator="reshape_and_cache_flash",
    devices="cuda_like",
    slot=0,
)
class CudaReshapeAndCacheFlash(ReshapeAndCacheFlash):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        key, value = args.key, args.value
        key_cache, value_cache = args.key_cache, args.value_cache
        slot_mapping = args.slot_mapping
        count = slot_mapping.shape[0]
        heads = key.shape[1]
        elements = heads * max(key.shape[2], value.shape[2])
        if INTERPRETER:
            block = max(next_power_of_two(elements), 16)
            rows = max(1, min(INTERPRETER_TILE // block, next_power_of_two(count)))
        else:
            block = min(max(next_power_of_two(elements), 16), GPU_BLOCK_LIMIT)
            rows = 1
        mantissa, bias, largest = FP8_FORMATS.get(args.kv_cache_dtype, (0, 0, 0))
        scale = Pointer("float32")
        self.count = count
        self._launch = KERNEL.bind(
            grid=(-(-count // rows), -(-elements // block)),
            arguments=(
                key_cache,
                value_cache,
                key,
                value,
                slot_mapping,
                args.k_scale if self.fp8 else scale,
                args.v_scale if self.fp8 else scale,
                count,
                self.block_size,
                heads,
                key.shape[2],
                value.shape[2],
                slot_mapping.strides[0],
                *key.strides,
                *value.strides,
                *key_cache.strides,
                *value_cache.strides,
            ),
            constexprs={
                "ROWS": rows,
                "BLOCK": block,
                "FP8": self.fp8,
                "MANTISSA": mantissa,
                "BIAS": bias,
                "MAX": largest,
            },
            device=self.device,
        )

    def launch(
        self, stream, key, value, slot_mapping, k_scale, v_scale, key_cache, value_cache
    ) -> None:
        if self.count == 0:
            return
        with stream_context(self.device, stream):
            self.check_slots(slot_mapping)
        self._launch(
            stream, key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale
        )
