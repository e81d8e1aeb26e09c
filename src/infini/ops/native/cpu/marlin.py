"""Kernels reading and writing vLLM's Marlin weight layout (`base/_marlin.py`
describes it): the GPTQ/AWQ repacks and the MoE product that unpacks tiles
on the fly.

Both work chunk by chunk: a chunk of 1024 codes is one block of the matrix
(16 x 64, or 32 x 32 for the 8-bit-activation layout), and the tables built
here say which element of the block each code of the chunk holds.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from infini.ops.base._marlin import (
    AWQ_ORDER,
    CHUNK,
    SCALE_PERM,
    SCALE_PERM_SINGLE,
    TILE,
    TILE_N,
    block_shape,
    chunk_source,
    pack_factor,
    zero_point_position,
)

from .dtype_io import loader, storer
from .jit import kernel
from .memory import STORAGE, element_array

# Tiles per parallel task of the repacks: a tile is 1024 codes, so a task
# moves at least 32 KiB of codes at 4 bits.
REPACK_TILES_PER_TASK = 64


@cache
def chunk_tables(num_bits: int, is_a_8bit: bool) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns): int64 arrays of 1024, the block element of each code
    of a chunk."""
    sources = np.array(chunk_source(num_bits, is_a_8bit), dtype=np.int64)
    return np.ascontiguousarray(sources[:, 0]), np.ascontiguousarray(sources[:, 1])


@cache
def code_column_tables(
    source: str, num_bits: int, is_a_8bit: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, word columns, column shifts) for each code of a chunk: its row
    in the block, the int32 column of the source row holding it relative to
    the block's first (GPTQ: the column itself; AWQ: column / pack), and
    the bit offset its column adds (AWQ's order inside an int32; 0 for
    GPTQ)."""
    rows, columns = chunk_tables(num_bits, is_a_8bit)
    if source == "gptq":
        return rows, columns, np.zeros_like(columns)
    pack = pack_factor(num_bits)
    order = AWQ_ORDER[num_bits]
    shift_of = np.array([num_bits * order.index(i) for i in range(pack)])
    return rows, columns // pack, shift_of[columns % pack].astype(np.int64)


@cache
def repack_kernel(source: str, num_bits: int, perm_dtype: str | None):
    """``run(out, weight, perm, rows, word_columns, column_shifts, size_k,
    size_n, block_rows, block_columns) -> int`` on addresses (tables from
    `code_column_tables`): writes the Marlin layout of a GPTQ (`source`
    "gptq": packed along k) or AWQ ("awq": packed along n, in AWQ's order)
    matrix. With `perm_dtype`, row ``k`` of the result is source row
    ``perm[k]`` (GPTQ act-order). Returns -1, or the position of the first
    out-of-range element of `perm` (nothing written then)."""
    bits = num_bits
    pack = pack_factor(num_bits)
    mask = (1 << num_bits) - 1
    words_per_chunk = CHUNK // pack
    has_perm = perm_dtype is not None
    perm_storage = STORAGE[perm_dtype or "int64"]
    gptq = source == "gptq"
    tiles_per_task = REPACK_TILES_PER_TASK

    def run(
        out_address,
        weight_address,
        perm_address,
        rows,
        word_columns,
        column_shifts,
        size_k,
        size_n,
        block_rows,
        block_columns,
    ):
        words = size_k * size_n // pack
        weight = element_array(weight_address, words, np.uint32)
        out = element_array(out_address, words, np.uint32)
        perm = element_array(perm_address, size_k if has_perm else 0, perm_storage)
        if has_perm:
            for i in range(size_k):
                value = np.int64(perm[i])
                if value < 0 or value >= size_k:
                    return i
        column_chunks = size_n // block_columns
        tiles = (size_k // block_rows) * column_chunks
        tasks = (tiles + tiles_per_task - 1) // tiles_per_task
        for task in prange(tasks):
            # Where each row of the current row block starts in `weight`,
            # and the bit offset of its codes.
            row_starts = np.empty(block_rows, np.int64)
            row_shifts = np.empty(block_rows, np.int64)
            current_row_block = -1
            last = min(tiles, (task + 1) * tiles_per_task)
            for tile in range(task * tiles_per_task, last):
                row_block = tile // column_chunks
                chunk = tile - row_block * column_chunks
                if row_block != current_row_block:
                    current_row_block = row_block
                    for r in range(block_rows):
                        k = row_block * block_rows + r
                        if has_perm:
                            k = np.int64(perm[k])
                        if gptq:
                            row_starts[r] = (k // pack) * size_n
                            row_shifts[r] = bits * (k % pack)
                        else:
                            row_starts[r] = k * (size_n // pack)
                            row_shifts[r] = 0
                first_column = chunk * block_columns
                first_word = first_column if gptq else first_column // pack
                base = (row_block * block_rows * size_n + chunk * CHUNK) // pack
                for word_index in range(words_per_chunk):
                    word = np.int64(0)
                    for i in range(pack):
                        p = word_index * pack + i
                        r = rows[p]
                        packed = np.int64(
                            weight[row_starts[r] + first_word + word_columns[p]]
                        )
                        shift = row_shifts[r] + column_shifts[p]
                        word |= ((packed >> shift) & mask) << (bits * i)
                    out[base + word_index] = np.uint32(word)
        return -1

    return kernel(run, parallel=True)


def run_repack(
    source: str,
    num_bits: int,
    is_a_8bit: bool,
    perm_dtype: str | None,
    out,
    weight,
    perm,
    size_k: int,
    size_n: int,
) -> int:
    """Runs `repack_kernel` on tensors; returns its result."""
    rows, word_columns, column_shifts = code_column_tables(source, num_bits, is_a_8bit)
    block_rows, block_columns = block_shape(is_a_8bit)
    run = repack_kernel(source, num_bits, perm_dtype)
    return run(
        out.data_ptr(),
        weight.data_ptr(),
        perm.data_ptr() if perm_dtype is not None else 0,
        rows,
        word_columns,
        column_shifts,
        size_k,
        size_n,
        block_rows,
        block_columns,
    )


# -- moe_wna16_marlin_gemm ----------------------------------------------------


@cache
def standard_tile_destinations(num_bits: int) -> np.ndarray:
    """For each code of a 16 x 64 chunk, its row-major place in the tile."""
    rows, columns = chunk_tables(num_bits, False)
    return rows * TILE_N + columns


def column_positions(size_n: int, permutation) -> np.ndarray:
    """Stored position of each logical column in a row permuted in runs."""
    run = len(permutation)
    inverse = np.empty(run, dtype=np.int64)
    for q, column in enumerate(permutation):
        inverse[column] = q
    columns = np.arange(size_n, dtype=np.int64)
    return (columns // run) * run + inverse[columns % run]


def scale_positions(size_n: int, groups: int) -> np.ndarray:
    """Where column ``n`` of a Marlin scale row is: runs of 64 for grouped
    scales, of 32 for one group (channelwise)."""
    return column_positions(size_n, SCALE_PERM if groups > 1 else SCALE_PERM_SINGLE)


def bias_positions(size_n: int) -> np.ndarray:
    return column_positions(size_n, SCALE_PERM_SINGLE)


def zero_positions(size_n: int, num_bits: int) -> np.ndarray:
    """Code position of column ``n`` in a packed Marlin zero-point row."""
    run = len(SCALE_PERM)
    local = np.array(
        [zero_point_position(c, num_bits) for c in range(run)], dtype=np.int64
    )
    columns = np.arange(size_n, dtype=np.int64)
    return (columns // run) * run + local[columns % run]


# Positions in the GEMM's `plan` array.
(
    SIZE_M,
    SIZE_N,
    SIZE_K,
    TOP_K,
    EXPERTS,
    GROUPS,
    GROUP_SIZE,
    BLOCK,
    SORTED_COUNT,
    EXPERT_COUNT,
    CODE_BIAS,
    HAS_ZEROS,
    ACT_ORDER,
    GROUPS_FROM_INDEX,
    MUL_TOPK,
    HAS_BIAS,
    PLAN_SIZE,
) = range(17)

# Data errors the GEMM reports as (code, position, value).
BAD_PADDED_COUNT = 1
BAD_EXPERT = 2
BAD_TOKEN = 3
BAD_PERM = 4
BAD_GROUP = 5


@cache
def moe_gemm_kernel(dtype: str, num_bits: int, id_dtype: str, index_dtype: str):
    """``run(out, a, weight, scales, zeros, bias, g_idx, perm, sorted_ids,
    expert_ids, padded_count, topk_weights, plan, destinations,
    scale_columns, zero_columns, bias_columns) -> (code, position, value)``
    on addresses (absent tensors: 0). `dtype` is that of `a`, `out`,
    `scales` and `bias`; `id_dtype` that of the three routing tensors,
    `index_dtype` that of `g_idx` and `perm`. Every data-dependent index is
    checked before anything is written; code 0 means success."""
    load, store = loader(dtype), storer(dtype)
    storage = STORAGE[dtype]
    id_storage = STORAGE[id_dtype]
    index_storage = STORAGE[index_dtype]
    bits = num_bits
    pack = pack_factor(num_bits)
    mask = (1 << num_bits) - 1
    words_per_tile = CHUNK // pack
    tile_k, tile_n = TILE, TILE_N

    def run(
        out_address,
        a_address,
        weight_address,
        scales_address,
        zeros_address,
        bias_address,
        g_idx_address,
        perm_address,
        sorted_address,
        experts_address,
        padded_address,
        topk_address,
        plan,
        destinations,
        scale_columns,
        zero_columns,
        bias_columns,
    ):
        size_m, size_n, size_k = plan[SIZE_M], plan[SIZE_N], plan[SIZE_K]
        top_k, experts, groups = plan[TOP_K], plan[EXPERTS], plan[GROUPS]
        group_size, block = plan[GROUP_SIZE], plan[BLOCK]
        code_bias = plan[CODE_BIAS]
        has_zeros, act_order = plan[HAS_ZEROS] != 0, plan[ACT_ORDER] != 0
        groups_from_index = plan[GROUPS_FROM_INDEX] != 0
        mul_topk, has_bias = plan[MUL_TOPK] != 0, plan[HAS_BIAS] != 0
        entries = size_m * top_k
        a = element_array(a_address, size_m * size_k, storage)
        out = element_array(out_address, entries * size_n, storage)
        weight = element_array(
            weight_address, experts * size_k * size_n // pack, np.uint32
        )
        scales = element_array(scales_address, experts * groups * size_n, storage)
        zeros = element_array(
            zeros_address,
            experts * groups * size_n // pack if has_zeros else 0,
            np.uint32,
        )
        bias = element_array(bias_address, experts * size_n if has_bias else 0, storage)
        index_count = experts * size_k if act_order else 0
        g_idx = element_array(g_idx_address, index_count, index_storage)
        perm = element_array(perm_address, index_count, index_storage)
        sorted_ids = element_array(sorted_address, plan[SORTED_COUNT], id_storage)
        expert_ids = element_array(experts_address, plan[EXPERT_COUNT], id_storage)
        padded = element_array(padded_address, 1, id_storage)
        topk_weights = element_array(
            topk_address, entries if mul_topk else 0, np.float32
        )

        # Checks, before anything is written.
        padded_count = np.int64(padded[0])
        if (
            padded_count < 0
            or padded_count > plan[SORTED_COUNT]
            or padded_count % block != 0
            or padded_count // block > plan[EXPERT_COUNT]
        ):
            return BAD_PADDED_COUNT, 0, padded_count
        blocks = padded_count // block
        active = np.empty(blocks, np.int64)
        active_count = 0
        for b in range(blocks):
            expert = np.int64(expert_ids[b])
            if expert < -1 or expert >= experts:
                return BAD_EXPERT, b, expert
            if expert == -1:
                continue
            for r in range(block):
                entry = np.int64(sorted_ids[b * block + r])
                if entry < 0:
                    return BAD_TOKEN, b * block + r, entry
            active[active_count] = b
            active_count += 1
        if act_order:
            for i in range(index_count):
                value = np.int64(perm[i])
                if value < 0 or value >= size_k:
                    return BAD_PERM, i, value
            if groups_from_index:
                for i in range(index_count):
                    value = np.int64(g_idx[i])
                    if value < 0 or value >= groups:
                        return BAD_GROUP, i, value

        column_tiles = size_n // tile_n
        k_tiles = size_k // tile_k
        expert_words = size_k * size_n // pack
        for item in prange(active_count * column_tiles):
            b = active[item // column_tiles]
            column_tile = item % column_tiles
            first_column = column_tile * tile_n
            expert = np.int64(expert_ids[b])
            # The block's entries (padding skipped) and their rows of `a`.
            entry_of = np.empty(block, np.int64)
            rows = 0
            for r in range(block):
                entry = np.int64(sorted_ids[b * block + r])
                if entry < entries:
                    entry_of[rows] = entry
                    rows += 1
            if rows == 0:
                continue
            accumulator = np.zeros((rows, tile_n), np.float32)
            codes = np.empty(tile_k * tile_n, np.int64)
            weights = np.empty((tile_k, tile_n), np.float32)
            activations = np.empty((rows, tile_k), np.float32)
            row_scales = np.empty(tile_n, np.float32)
            row_zeros = np.empty(tile_n, np.float32)
            current_group = np.int64(-1)
            for k_tile in range(k_tiles):
                base = expert * expert_words + k_tile * (size_n * tile_k // pack)
                base += column_tile * words_per_tile
                for w in range(words_per_tile):
                    word = np.int64(weight[base + w])
                    for i in range(pack):
                        codes[destinations[w * pack + i]] = (word >> (bits * i)) & mask
                for r in range(tile_k):
                    k = k_tile * tile_k + r
                    if groups_from_index:
                        group = np.int64(g_idx[expert * size_k + k])
                    elif group_size > 0:
                        group = k // group_size
                    else:
                        group = np.int64(0)
                    if group != current_group:
                        current_group = group
                        row = (expert * groups + group) * size_n
                        for c in range(tile_n):
                            n = first_column + c
                            row_scales[c] = load(scales, row + scale_columns[n])
                            if has_zeros:
                                position = zero_columns[n]
                                packed = np.int64(zeros[(row + position) // pack])
                                row_zeros[c] = np.float32(
                                    (packed >> (bits * (position % pack))) & mask
                                )
                            else:
                                row_zeros[c] = np.float32(code_bias)
                    for c in range(tile_n):
                        weights[r, c] = (
                            np.float32(codes[r * tile_n + c]) - row_zeros[c]
                        ) * row_scales[c]
                for j in range(rows):
                    source_row = (entry_of[j] // top_k) * size_k
                    for r in range(tile_k):
                        k = k_tile * tile_k + r
                        if act_order:
                            k = np.int64(perm[expert * size_k + k])
                        activations[j, r] = load(a, source_row + k)
                for j in range(rows):
                    for r in range(tile_k):
                        value = activations[j, r]
                        for c in range(tile_n):
                            accumulator[j, c] += value * weights[r, c]
            for j in range(rows):
                entry = entry_of[j]
                factor = topk_weights[entry] if mul_topk else np.float32(1.0)
                target = entry * size_n + first_column
                for c in range(tile_n):
                    value = accumulator[j, c]
                    if has_bias:
                        value += load(
                            bias, expert * size_n + bias_columns[first_column + c]
                        )
                    store(out, target + c, value * factor)
        return 0, 0, 0

    return kernel(run, parallel=True)
