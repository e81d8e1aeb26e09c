"""NineToothed `rotary_embedding` (slot 9, NVIDIA): vLLM RoPE in place,
`query` and the optional `key` in one launch, a tile of tokens per program.

Each rotated tensor is passed twice, as the first and the second elements
of its rotation pairs: views ``(tokens outer, tokens inner, heads, half)``
whose last stride steps from pair to pair (one element for NeoX, two for
GPT-J). Where a view starts inside each head (`rope_dim_offset`, plus
``half`` or one element for the second elements) is a leading dimension of
size 2 whose stride is that distance: the arrangement takes index 1 of it,
so the start is a stride, fixed per geometry, and no pointer moves per
call. Without `key`, the key views are the query's with that leading size
1, so index 1 is out of range and every access is masked off.

Arrangement: `positions` ``(outer, inner)`` and the views are cut along the
inner token dimension into tiles of ``block`` tokens (all heads and pairs
in one tile). Application: the cosines and sines of each token's position
are gathered from `cos_sin_cache` (its row, through its pointer and
strides: an arrangement cannot index by data), and ``(x, y)`` becomes
``(x cos - y sin, y cos + x sin)`` (sines negated for `inverse`), in
float32, rounded once. Positions are checked against the cache before the
launch (`check_positions`), as at slot 0: a bad one raises `ValueError`
and nothing is written.
"""

from __future__ import annotations

import ninetoothed.language as ntl

from infini.ops.base.rotary_embedding import RotaryEmbedding
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.ninetoothed.generation import TensorSpec, kernel_source
from infini.ops.ninetoothed.language import upcast
from infini.ops.ninetoothed.launch import bind_kernel, tensor_operand
from infini.ops.runtime.triton import (
    INTERPRETER,
    next_power_of_two,
    require_device,
)

# Elements a program rotates at most (tokens x heads x pairs); the
# interpreter runs a tile as one NumPy step, so it takes many.
GPU_TILE = 4096
INTERPRETER_TILE = 65536


def _pairs(tensor, block, block_heads, block_half):
    """Index 1 of the leading (start) dimension, then tiles of ``block``
    tokens with every head and pair: ``(block, block_heads, block_half)``."""
    started = tensor[1]
    tiled = started.tile((1, block, block_heads, block_half)).squeeze((2, 3))
    tiled.dtype = tiled.dtype.squeeze(0)
    return tiled


def arrangement(
    positions,
    query_x,
    query_y,
    key_x,
    key_y,
    cache,
    half,
    sign,
    *,
    block,
    block_query_heads,
    block_key_heads,
    block_half,
):
    tokens = positions.tile((1, block))
    tokens.dtype = tokens.dtype.squeeze(0)
    return (
        tokens,
        _pairs(query_x, block, block_query_heads, block_half),
        _pairs(query_y, block, block_query_heads, block_half),
        _pairs(key_x, block, block_key_heads, block_half),
        _pairs(key_y, block, block_key_heads, block_half),
        cache,
        half,
        sign,
    )


def application(positions, query_x, query_y, key_x, key_y, cache, half, sign):
    index = ntl.arange(0, query_x.shape[2])
    keep = index < half
    position = positions
    row = cache.data_ptr() + position.to(ntl.int64)[:, None] * cache.stride(0)
    cos = ntl.load(row + index[None, :] * cache.stride(1), mask=keep[None, :])
    sin = ntl.load(row + (index + half)[None, :] * cache.stride(1), mask=keep[None, :])
    cos = upcast(cos)[:, None, :]
    sin = (upcast(sin) * sign)[:, None, :]
    x = upcast(query_x)
    y = upcast(query_y)
    query_x = x * cos - y * sin  # noqa: F841 - a store
    query_y = y * cos + x * sin  # noqa: F841 - a store
    x = upcast(key_x)
    y = upcast(key_y)
    key_x = x * cos - y * sin  # noqa: F841 - a store
    key_y = y * cos + x * sin  # noqa: F841 - a store


def specs() -> tuple[TensorSpec, ...]:
    return (
        TensorSpec("positions", 2, other=0),
        TensorSpec("query_x", 5, other=0),
        TensorSpec("query_y", 5, other=0),
        TensorSpec("key_x", 5, other=0),
        TensorSpec("key_y", 5, other=0),
        TensorSpec("cache", 2),
        TensorSpec("half", 0),
        TensorSpec("sign", 0),
    )


def blocks(tokens: int, query_heads: int, key_heads: int, half: int):
    """``(tokens, query heads, key heads, pairs)`` per tile."""
    heads = (next_power_of_two(query_heads), next_power_of_two(max(key_heads, 1)))
    pairs = next_power_of_two(half)
    tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
    per_tile = max(heads) * pairs
    block = max(1, min(tile // per_tile, next_power_of_two(max(tokens, 1))))
    return block, heads[0], heads[1], pairs


def source(block: int, query_heads: int, key_heads: int, half: int):
    return kernel_source(
        "rotary_embedding",
        arrangement,
        application,
        specs(),
        {
            "block": block,
            "block_query_heads": query_heads,
            "block_key_heads": key_heads,
            "block_half": half,
        },
    )


@implementation(operator="rotary_embedding", devices=("nvidia",), slot=9)
class NineToothedRotaryEmbedding(RotaryEmbedding):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        positions, query, key = args.positions, args.query, args.key
        cache, head_size = args.cos_sin_cache, args.head_size
        self.tokens = positions.numel
        if self.tokens == 0:
            return
        # Tokens as (outer, inner): 1-D positions are one outer row.
        if positions.ndim == 2:
            tokens_shape = tuple(positions.shape)
            position_strides = tuple(positions.strides)
        else:
            tokens_shape = (1, positions.shape[0])
            position_strides = (0, positions.strides[0])
        half = self.rot_dim // 2
        offset = args.rope_dim_offset
        neox = bool(args.is_neox)

        def views(meta, heads):
            """The first and second elements of the pairs of `meta`."""
            token_strides = (
                tuple(meta.strides[:2]) if positions.ndim == 2 else (0, meta.strides[0])
            )
            head_stride, step = self.head_strides(meta, head_size)
            pair_step = step if neox else 2 * step
            second = offset + (half if neox else 1)
            shape = (2, *tokens_shape, heads, half)
            strides = (token_strides, head_stride, pair_step)
            return (
                tensor_operand(meta, shape, (offset * step, *strides[0], *strides[1:])),
                tensor_operand(meta, shape, (second * step, *strides[0], *strides[1:])),
            )

        query_x, query_y = views(query, self.query_heads)
        if key is not None:
            key_x, key_y = views(key, self.key_heads)
        else:
            # Leading size 1: index 1 is out of range, every access masked.
            def absent(operand):
                marker, shape, strides = operand
                return marker, (1, *shape[1:3], 1, shape[4]), strides

            key_x, key_y = absent(query_x), absent(query_y)
        block, query_block, key_block, half_block = blocks(
            tokens_shape[1], self.query_heads, self.key_heads, half
        )
        self._launch = bind_kernel(
            source(block, query_block, key_block, half_block),
            {
                "positions": tensor_operand(positions, tokens_shape, position_strides),
                "query_x": query_x,
                "query_y": query_y,
                "key_x": key_x,
                "key_y": key_y,
                "cache": tensor_operand(cache),
                "half": half,
                "sign": -1.0 if args.inverse else 1.0,
            },
            self.device,
            num_warps=4
            if block * max(query_block, key_block) * half_block <= 2048
            else 8,
        )

    def launch(self, stream, positions, query, key, cos_sin_cache) -> None:
        if self.tokens == 0:
            return
        with stream_context(self.device, stream):
            self.check_positions(positions)
        key = query if key is None else key
        self._launch(stream, positions, query, query, key, key, cos_sin_cache)
