"""CUDA-like `rotary_embedding` (slot 0) in Triton: vLLM RoPE, in place.

One launch rotates `query` and `key`. A program takes a tile of tokens; its
rows are (token, head) pairs of one tensor and its columns the ``rot_dim /
2`` rotation pairs, so each element is read and written by the program that
owns its pair (in place is safe). Cosines and sines are gathered per row
from the position's row of `cos_sin_cache`; everything is computed in
float32 and rounded once. Positions are checked against the cache before
the launch (`check_positions`, a scan on the device: a bad one raises
`ValueError` and nothing is written).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.rotary_embedding import RotaryEmbedding
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as, store_as
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    require_device,
)

# Rotation pairs a program covers (tokens x heads x pairs); the interpreter
# runs a program as NumPy steps, so it takes many.
GPU_TILE = 4096
INTERPRETER_TILE = 65536


@triton.jit
def rotate(
    data,
    positions,
    cache,
    first_token,
    tokens,
    seq,
    heads,
    half,
    rot_offset,
    position_stride0,
    position_stride1,
    stride0,
    stride1,
    head_stride,
    step,
    cache_row_stride,
    cache_column_stride,
    sign,
    TOKENS: tl.constexpr,
    HEADS: tl.constexpr,
    PAIRS: tl.constexpr,
    NEOX: tl.constexpr,
):
    row = tl.arange(0, TOKENS * HEADS)
    token = first_token + row // HEADS
    head = (row % HEADS).to(tl.int64)
    row_mask = (token < tokens) & (head < heads)
    outer = token // seq
    inner = token % seq
    position = tl.load(
        positions + outer * position_stride0 + inner * position_stride1,
        mask=row_mask,
        other=0,
    ).to(tl.int64)
    pair = tl.arange(0, PAIRS)[None, :]
    mask = row_mask[:, None] & (pair < half)
    table = cache + position[:, None] * cache_row_stride
    cos = load_as(table + pair * cache_column_stride, mask, tl.float32)
    sin = load_as(table + (pair + half) * cache_column_stride, mask, tl.float32)
    sin = sin * sign
    base = (outer * stride0 + inner * stride1 + head * head_stride)[:, None]
    if NEOX:
        first = rot_offset + pair
        second = first + half
    else:
        first = rot_offset + 2 * pair
        second = first + 1
    x_pointer = data + base + first * step
    y_pointer = data + base + second * step
    x = load_as(x_pointer, mask, tl.float32)
    y = load_as(y_pointer, mask, tl.float32)
    store_as(x_pointer, x * cos - y * sin, mask)
    store_as(y_pointer, y * cos + x * sin, mask)


@triton.jit
def rotary_embedding_kernel(
    query,
    key,
    positions,
    cache,
    tokens,
    seq,
    query_heads,
    key_heads,
    half,
    rot_offset,
    position_stride0,
    position_stride1,
    query_stride0,
    query_stride1,
    query_head_stride,
    query_step,
    key_stride0,
    key_stride1,
    key_head_stride,
    key_step,
    cache_row_stride,
    cache_column_stride,
    sign,
    TOKENS: tl.constexpr,
    QUERY_HEADS: tl.constexpr,
    KEY_HEADS: tl.constexpr,
    PAIRS: tl.constexpr,
    NEOX: tl.constexpr,
    HAS_KEY: tl.constexpr,
):
    first_token = tl.program_id(0).to(tl.int64) * TOKENS
    rotate(
        query,
        positions,
        cache,
        first_token,
        tokens,
        seq,
        query_heads,
        half,
        rot_offset,
        position_stride0,
        position_stride1,
        query_stride0,
        query_stride1,
        query_head_stride,
        query_step,
        cache_row_stride,
        cache_column_stride,
        sign,
        TOKENS,
        QUERY_HEADS,
        PAIRS,
        NEOX,
    )
    if HAS_KEY:
        rotate(
            key,
            positions,
            cache,
            first_token,
            tokens,
            seq,
            key_heads,
            half,
            rot_offset,
            position_stride0,
            position_stride1,
            key_stride0,
            key_stride1,
            key_head_stride,
            key_step,
            cache_row_stride,
            cache_column_stride,
            sign,
            TOKENS,
            KEY_HEADS,
            PAIRS,
            NEOX,
        )


KERNEL = Kernel(rotary_embedding_kernel)


@implementation(
    operator="rotary_embedding",
    devices="cuda_like",
    slot=0,
)
class CudaRotaryEmbedding(RotaryEmbedding):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        positions, query, key = args.positions, args.query, args.key
        cache, head_size = args.cos_sin_cache, args.head_size
        # Tokens as (outer, seq): 1-D positions have one outer row.
        if positions.ndim == 2:
            seq = positions.shape[1]
            position_strides = positions.strides
        else:
            seq = max(positions.shape[0], 1)
            position_strides = (0, positions.strides[0])
        self.tokens = tokens = positions.numel
        half = self.rot_dim // 2

        def token_strides(meta):
            if positions.ndim == 2:
                return meta.strides[:2]
            return (0, meta.strides[0])

        query_heads_block = next_power_of_two(self.query_heads)
        key_heads_block = next_power_of_two(max(self.key_heads, 1))
        pairs = next_power_of_two(half)
        widest = max(query_heads_block, key_heads_block) * pairs
        tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
        per_program = max(1, min(tile // widest, next_power_of_two(max(tokens, 1))))
        has_key = key is not None
        key_meta = key if has_key else Pointer(query.dtype)
        key_strides = (
            token_strides(key) + self.head_strides(key, head_size)
            if has_key
            else (0, 0, 0, 0)
        )
        self._launch = KERNEL.bind(
            grid=(-(-tokens // per_program),),
            arguments=(
                query,
                key_meta,
                positions,
                cache,
                tokens,
                seq,
                self.query_heads,
                self.key_heads,
                half,
                args.rope_dim_offset,
                *position_strides,
                *token_strides(query),
                *self.head_strides(query, head_size),
                *key_strides,
                *cache.strides,
                -1.0 if args.inverse else 1.0,
            ),
            constexprs={
                "TOKENS": per_program,
                "QUERY_HEADS": query_heads_block,
                "KEY_HEADS": key_heads_block,
                "PAIRS": pairs,
                "NEOX": bool(args.is_neox),
                "HAS_KEY": has_key,
            },
            device=self.device,
            num_warps=4 if per_program * widest <= 2048 else 8,
        )

    def launch(self, stream, positions, query, key, cos_sin_cache) -> None:
        if self.tokens == 0:
            return
        with stream_context(self.device, stream):
            self.check_positions(positions)
        self._launch(
            stream, query, query if key is None else key, positions, cos_sin_cache
        )
