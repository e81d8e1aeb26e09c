"""Attention kernels shared by `scaled_dot_product_attention` and the paged
attention operators.

Two ways to compute ``softmax(q k^T * scale + bias) v``:

- An online-softmax Numba kernel (flash-attention style): a task takes a few
  query rows, walks the keys in tiles of `KEY_TILE`, converts each key and
  value tile to float32 once and folds it into running maxima, sums and
  accumulators. Nothing of size ``L x S`` is stored. Used for decoding and
  short queries, where it is memory bound and reads every key once per task.
- For long queries (prefill), the two products go to NumPy's BLAS on float32
  copies, in blocks of query rows (causal blocks stop at their last
  visible key), and a parallel Numba kernel turns each block of scores into
  probabilities in place (`probability_kernel`).

Exponentials use `exp_float32`, a polynomial that LLVM vectorises (Numba's
`np.exp` is a scalar libm call), accurate to a few float32 ulps.
"""

from __future__ import annotations

from functools import cache

import numba
import numpy as np
from numba import prange

from .binding import compiled_entry, do_nothing
from .blas import has_sixteen_bit_instructions
from .dtype_io import loader, storer
from .jit import helper, kernel
from .memory import STORAGE, KnownAddresses, element_array
from .numeric import bits_float32, float32_to_bfloat16_bits

# Keys per tile of the online kernel.
KEY_TILE = 64

# Key elements (keys x kv heads x head size, summed over the tasks) up to
# which the online kernel runs its tasks on the calling thread rather than
# the pool: a decode step of a few short sequences.
SERIAL_KEY_ELEMENTS = 32768

# Prefill sequences with at least this many query tokens take the BLAS path.
PAGED_BLAS_TOKENS = 64
# Query tokens per block of the BLAS path.
PAGED_BLAS_BLOCK = 128

# The `slopes` argument of `probability_kernel` when there is no ALiBi.
NO_SLOPES = np.zeros(1, np.float32)
# Its `rounded` argument when the probabilities stay in the scores.
NO_ROUNDED = np.zeros((1, 1, 1), np.uint16)

_LOG2_E = np.float32(1.4426950408889634)

# Tile stages are separately compiled Numba functions rather than inlined
# helpers: each is typed and optimised once per process (and cached with the
# kernels that call them), where inlining made every kernel body re-type and
# re-optimise all of them; its cold compile took most of a minute. A call per
# tile of `KEY_TILE` keys costs nothing next to the tile's work.
stage = kernel(fastmath={"reassoc", "contract"})


@helper
def exp_float32(value):
    """``exp(value)`` in float32 through ``2^k * 2^r``: `k` goes straight into
    the exponent bits and ``2^r`` (``0 <= r < 1``) is a degree-6 polynomial.
    Relative error below 2e-6; `-inf` and anything below -87.3 give 0 (or a
    tiny value), which is all a softmax needs. Vectorises, unlike `np.exp`."""
    t = value * _LOG2_E
    t = min(max(t, np.float32(-127.0)), np.float32(127.0))
    k = np.floor(t)
    r = t - k
    p = np.float32(1.8775767e-3)
    p = p * r + np.float32(8.9893397e-3)
    p = p * r + np.float32(5.5826318e-2)
    p = p * r + np.float32(2.4015361e-1)
    p = p * r + np.float32(6.9315308e-1)
    p = p * r + np.float32(9.9999994e-1)
    return p * bits_float32(np.uint32(np.int32(k) + 127) << np.uint32(23))


@helper
def row_max(row, count):
    """The largest of ``row[:count]`` (-inf for none): eight running maxima,
    which LLVM turns into one vector, where a single running maximum stays
    a scalar loop (without `nnan` it may not reorder it): 0.23 against
    0.92 ns per element."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(-np.inf)
    whole = count - count % 8
    for j in range(0, whole, 8):
        m0 = max(m0, row[j])
        m1 = max(m1, row[j + 1])
        m2 = max(m2, row[j + 2])
        m3 = max(m3, row[j + 3])
        m4 = max(m4, row[j + 4])
        m5 = max(m5, row[j + 5])
        m6 = max(m6, row[j + 6])
        m7 = max(m7, row[j + 7])
    best = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
    for j in range(whole, count):
        best = max(best, row[j])
    return best


@helper
def dot2x4(query0, query1, key0, key1, key2, key3, features):
    """The dot products of two queries with four keys: six loads feed eight
    independent vector accumulators."""
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0)
    for d in range(features):
        q0, q1 = query0[d], query1[d]
        k0, k1, k2, k3 = key0[d], key1[d], key2[d], key3[d]
        a0 += q0 * k0
        a1 += q0 * k1
        a2 += q0 * k2
        a3 += q0 * k3
        b0 += q1 * k0
        b1 += q1 * k1
        b2 += q1 * k2
        b3 += q1 * k3
    return a0, a1, a2, a3, b0, b1, b2, b3


@helper
def dot1x4(query, key0, key1, key2, key3, features):
    """The dot products of one query with four keys."""
    a0 = a1 = a2 = a3 = np.float32(0)
    for d in range(features):
        q = query[d]
        a0 += q * key0[d]
        a1 += q * key1[d]
        a2 += q * key2[d]
        a3 += q * key3[d]
    return a0, a1, a2, a3


@stage
def tile_scores(queries, keys, scores, rows, count, features):
    """``scores[r, j] = queries[r] . keys[j]`` for a tile, by blocks of two
    query rows and four keys (fewer loads per multiply-add)."""
    quads = count - count % 4
    pairs = rows - rows % 2
    for r in range(0, pairs, 2):
        first, second = scores[r], scores[r + 1]
        query0, query1 = queries[r], queries[r + 1]
        for j in range(0, quads, 4):
            (
                first[j],
                first[j + 1],
                first[j + 2],
                first[j + 3],
                second[j],
                second[j + 1],
                second[j + 2],
                second[j + 3],
            ) = dot2x4(
                query0, query1, keys[j], keys[j + 1], keys[j + 2], keys[j + 3], features
            )
    for r in range(pairs, rows):
        # The last row when odd (a GQA group of three): four keys at a time.
        row, query = scores[r], queries[r]
        for j in range(0, quads, 4):
            row[j], row[j + 1], row[j + 2], row[j + 3] = dot1x4(
                query, keys[j], keys[j + 1], keys[j + 2], keys[j + 3], features
            )
    for r in range(rows):
        # The keys past the last block of four.
        query = queries[r]
        for j in range(quads, count):
            key = keys[j]
            total = np.float32(0)
            for d in range(features):
                total += query[d] * key[d]
            scores[r, j] = total


@stage
def tile_softmax(scores, rows, count, maxima, sums, acc, features):
    """Folds a tile of scores (masked ones `-inf`) into the running maxima
    and sums, rescales the accumulators, and leaves the unnormalised
    probabilities in `scores` (0 for a row with nothing visible)."""
    for r in range(rows):
        best = row_max(scores[r], count)
        if best == -np.inf:
            for j in range(count):
                scores[r, j] = np.float32(0)
            continue
        previous = maxima[r]
        new = max(previous, best)
        maxima[r] = new
        total = np.float32(0)
        for j in range(count):
            p = exp_float32(scores[r, j] - new)
            scores[r, j] = p
            total += p
        if previous != new:
            correction = exp_float32(previous - new)
            sums[r] = sums[r] * correction + total
            for d in range(features):
                acc[r, d] *= correction
        else:
            sums[r] += total


@stage
def tile_accumulate(weights, values, acc, rows, count, features):
    """``acc[r] += weights[r, :count] @ values[:count]``, as row updates of
    `acc` (vectorised over the features, no horizontal sums and no
    transposed value tile). Two rows and four keys per update: each value
    load feeds two rows, and each accumulator element is loaded and stored
    once per four keys."""
    quads = count - count % 4
    pairs = rows - rows % 2
    for r in range(0, pairs, 2):
        target0, target1 = acc[r], acc[r + 1]
        weight0, weight1 = weights[r], weights[r + 1]
        for j in range(0, quads, 4):
            a0, a1, a2, a3 = weight0[j], weight0[j + 1], weight0[j + 2], weight0[j + 3]
            b0, b1, b2, b3 = weight1[j], weight1[j + 1], weight1[j + 2], weight1[j + 3]
            value0, value1 = values[j], values[j + 1]
            value2, value3 = values[j + 2], values[j + 3]
            for d in range(features):
                v0, v1, v2, v3 = value0[d], value1[d], value2[d], value3[d]
                target0[d] += (a0 * v0 + a1 * v1) + (a2 * v2 + a3 * v3)
                target1[d] += (b0 * v0 + b1 * v1) + (b2 * v2 + b3 * v3)
        for j in range(quads, count):
            a, b = weight0[j], weight1[j]
            value = values[j]
            for d in range(features):
                target0[d] += a * value[d]
                target1[d] += b * value[d]
    for r in range(pairs, rows):
        # The last row when odd (a GQA group of three): four keys per update
        # too.
        target = acc[r]
        weight = weights[r]
        for j in range(0, quads, 4):
            a0, a1, a2, a3 = weight[j], weight[j + 1], weight[j + 2], weight[j + 3]
            value0, value1 = values[j], values[j + 1]
            value2, value3 = values[j + 2], values[j + 3]
            for d in range(features):
                target[d] += (a0 * value0[d] + a1 * value1[d]) + (
                    a2 * value2[d] + a3 * value3[d]
                )
        for j in range(quads, count):
            w = weight[j]
            value = values[j]
            for d in range(features):
                target[d] += w * value[d]


@helper
def load_tile_row(tile, j, features, source, base, step, load):
    """Row `j` of a float32 tile from `features` elements of `source` at
    `base` (every `step`); a contiguous row goes through a slice, so the
    conversion loop vectorises."""
    row = tile[j]
    if step == 1:
        window = source[base : base + features]
        for d in range(features):
            row[d] = load(window, d)
    else:
        for d in range(features):
            row[d] = load(source, base + d * step)


@helper
def load_query_row(queries, r, features, source, base, step, load, factor):
    """`load_tile_row` into row `r` of the queries, times `factor` (the
    softmax scale, applied once per query rather than per score)."""
    load_tile_row(queries, r, features, source, base, step, load)
    row = queries[r]
    for d in range(features):
        row[d] *= factor


@helper
def store_output_row(out, base, step, values, count, inverse, store):
    """``values[:count] * inverse`` into `out` from `base` (every `step`);
    a contiguous row through a slice, as `load_tile_row` reads one."""
    if step == 1:
        window = out[base : base + count]
        for d in range(count):
            store(window, d, values[d] * inverse)
    else:
        for d in range(count):
            store(out, base + d * step, values[d] * inverse)


@helper
def load_run(flat, first, elements, source, base, load):
    """`elements` consecutive elements of `source` from `base`, as float32,
    into `flat` from `first` (whole rows of a tile)."""
    # Both through slices: indices from 0 need no negative-index check,
    # which would keep the loop from vectorising.
    window = source[base : base + elements]
    target = flat[first : first + elements]
    for e in range(elements):
        target[e] = load(window, e)


@cache
def sdpa_online_kernel(dtype: str):
    """The online-softmax kernel of `scaled_dot_product_attention`.

    A task is `group` consecutive batch entries that share their key and
    value (the query heads of one kv head under GQA, else one entry) and
    `block_rows` query rows of each, so every key and value tile is
    converted once for the group. Operand `o` of batch entry `b` starts at
    ``offsets[o, b]``; operands are out, query, key, value, mask (float32,
    added to the scores; `-inf` hides) and noise (the dropout multipliers,
    float32 rows of ``S``). `strides` holds, in elements, q (row, feature),
    k (position, feature), v (position, feature), out (row, feature) and
    mask (row, position) steps.
    """
    load, store = loader(dtype), storer(dtype)
    storage = STORAGE[dtype]

    def task_body(
        task,
        o,
        q,
        k,
        v,
        m,
        noise,
        offsets,
        sizes,
        strides,
        factor,
        causal,
        masked,
        dropout,
        block_rows,
        group,
    ):
        length, keys, features, value_features = sizes[0], sizes[1], sizes[2], sizes[3]
        q_row, q_col, k_row, k_col = strides[0], strides[1], strides[2], strides[3]
        v_row, v_col, o_row, o_col = strides[4], strides[5], strides[6], strides[7]
        m_row, m_col = strides[8], strides[9]
        blocks = (length + block_rows - 1) // block_rows
        b0 = (task // blocks) * group
        first = (task % blocks) * block_rows
        rows = min(block_rows, length - first)
        total = rows * group
        queries = np.empty((total, features), np.float32)
        key_tile = np.empty((KEY_TILE, features), np.float32)
        value_tile = np.empty((KEY_TILE, value_features), np.float32)
        scores = np.empty((total, KEY_TILE), np.float32)
        maxima = np.full(total, -np.inf, np.float32)
        sums = np.zeros(total, np.float32)
        acc = np.zeros((total, value_features), np.float32)
        # Row `h * rows + r` is query row `first + r` of batch entry `b0 + h`.
        for h in range(group):
            for r in range(rows):
                base = offsets[1, b0 + h] + (first + r) * q_row
                load_query_row(
                    queries, h * rows + r, features, q, base, q_col, load, factor
                )
        end = min(keys, first + rows) if causal else keys
        for start in range(0, end, KEY_TILE):
            count = min(KEY_TILE, end - start)
            for j in range(count):
                base = offsets[2, b0] + (start + j) * k_row
                load_tile_row(key_tile, j, features, k, base, k_col, load)
            tile_scores(queries, key_tile, scores, total, count, features)
            for h in range(group):
                for r in range(rows):
                    i = first + r
                    row = h * rows + r
                    if causal:
                        for j in range(max(i + 1 - start, 0), count):
                            scores[row, j] = -np.inf
                    if masked:
                        base = offsets[4, b0 + h] + i * m_row + start * m_col
                        for j in range(count):
                            scores[row, j] += m[base + j * m_col]
            tile_softmax(scores, total, count, maxima, sums, acc, value_features)
            if dropout:
                for h in range(group):
                    for r in range(rows):
                        base = offsets[5, b0 + h] + (first + r) * keys + start
                        for j in range(count):
                            scores[h * rows + r, j] *= noise[base + j]
            for j in range(count):
                base = offsets[3, b0] + (start + j) * v_row
                load_tile_row(value_tile, j, value_features, v, base, v_col, load)
            tile_accumulate(scores, value_tile, acc, total, count, value_features)
        for h in range(group):
            for r in range(rows):
                row = h * rows + r
                base = offsets[0, b0 + h] + (first + r) * o_row
                inverse = np.float32(1) / sums[row] if sums[row] > 0 else np.float32(0)
                store_output_row(
                    o, base, o_col, acc[row], value_features, inverse, store
                )

    # `run` captures `body`, and the on-disk cache keys captured functions on
    # their qualified names: make the name say which dtype it loads.
    task_body.__qualname__ += f"[{dtype}]"
    body = kernel(task_body, fastmath={"reassoc", "contract"})

    def run(
        out_address,
        q_address,
        k_address,
        v_address,
        mask_address,
        noise_address,
        spans,
        offsets,
        sizes,
        strides,
        scale,
        causal,
        masked,
        dropout,
        block_rows,
        group,
        tasks,
    ):
        o = element_array(out_address, spans[0], storage)
        q = element_array(q_address, spans[1], storage)
        k = element_array(k_address, spans[2], storage)
        v = element_array(v_address, spans[3], storage)
        m = element_array(mask_address, spans[4], np.float32)
        noise = element_array(noise_address, spans[5], np.float32)
        factor = np.float32(scale)
        # `np.int64`: inside the parfor the index is unsigned, and the body
        # would be compiled a second time for it.
        for task in prange(tasks):
            body(
                np.int64(task),
                o,
                q,
                k,
                v,
                m,
                noise,
                offsets,
                sizes,
                strides,
                factor,
                causal,
                masked,
                dropout,
                block_rows,
                group,
            )

    return kernel(run, parallel=True)


@cache
def probability_kernel():
    """Turns a contiguous float32 block of scores ``(batches, rows, count)``
    (query rows ``first..`` against keys ``0..count``) into attention
    probabilities in place: ALiBi bias ``slopes[b] * (j - (i + shift))``,
    mask (float32, added), causal limit ``j <= i + shift``, softmax, then the
    dropout multipliers. Mask and noise element ``(b, i, j)`` are at
    ``offsets[0|1, b] + i * row_step + j * col_step`` (noise rows are `keys`
    long). A row with nothing visible becomes 0. With `round_out` (and no
    dropout) the probabilities go to `rounded` instead, as bfloat16 bits of
    the scores' shape, in the same pass that normalises them."""

    def row_body(
        task,
        scores,
        m,
        noise,
        slopes,
        offsets,
        first,
        shift,
        m_row,
        m_col,
        keys,
        causal,
        masked,
        dropout,
        alibi,
        rounded,
        round_out,
    ):
        batches, rows, count = scores.shape
        b = task // rows
        r = task - b * rows
        i = first + r
        row = scores[b, r]
        visible = max(min(count, i + 1 + shift), 0) if causal else count
        for j in range(visible, count):
            row[j] = -np.inf
        if alibi:
            slope = slopes[b]
            for j in range(visible):
                row[j] += slope * np.float32(j - i - shift)
        if masked:
            base = offsets[0, b] + i * m_row
            for j in range(visible):
                row[j] += m[base + j * m_col]
        best = row_max(row, visible)
        if best == -np.inf:
            for j in range(count):
                row[j] = np.float32(0)
            if round_out:
                for j in range(count):
                    rounded[b, r, j] = 0
            return
        total = np.float32(0)
        for j in range(count):
            p = exp_float32(row[j] - best)
            row[j] = p
            total += p
        inverse = np.float32(1) / total
        if dropout:
            base = offsets[1, b] + i * keys
            for j in range(count):
                row[j] = row[j] * inverse * noise[base + j]
        elif round_out:
            target = rounded[b, r]
            for j in range(count):
                target[j] = float32_to_bfloat16_bits(row[j] * inverse)
        else:
            for j in range(count):
                row[j] *= inverse

    body = kernel(row_body, fastmath={"reassoc", "contract"})

    def run(
        scores,
        mask_address,
        noise_address,
        mask_span,
        noise_span,
        slopes,
        offsets,
        first,
        shift,
        m_row,
        m_col,
        keys,
        causal,
        masked,
        dropout,
        alibi,
        rounded,
        round_out,
    ):
        m = element_array(mask_address, mask_span, np.float32)
        noise = element_array(noise_address, noise_span, np.float32)
        batches, rows, count = scores.shape
        for task in prange(batches * rows):
            body(
                np.int64(task),
                scores,
                m,
                noise,
                slopes,
                offsets,
                first,
                shift,
                m_row,
                m_col,
                keys,
                causal,
                masked,
                dropout,
                alibi,
                rounded,
                round_out,
            )

    return kernel(run, parallel=True)


@cache
def paged_attention_kernel(
    dtype: str, table_dtype: str, lengths_dtype: str, cum_dtype: str
):
    """The online-softmax kernel of the paged attention operators (decode:
    `prefill` False, one query token per sequence; prefill: the spans of
    `cum_seq_lens_q`). It first checks the index tensors and returns a
    nonzero code (base `paged_attention_infinilm`) with ``(seq, position,
    value)`` in `report` before writing anything.

    A task is (sequence, kv head, block of `block_tokens` query tokens); its
    rows are those tokens times the query heads of the kv head, so every key
    and value tile is converted once for the whole GQA group. The tasks run
    on the calling thread when the key elements they read (keys x kv heads
    x head size) are at most `serial_elements`, else on the pool.
    """
    body = paged_task_kernel(dtype)
    storage = STORAGE[dtype]
    store = storer(dtype)
    table_storage, lengths_storage = STORAGE[table_dtype], STORAGE[lengths_dtype]
    cum_storage = STORAGE[cum_dtype]

    def run(
        out_address,
        q_address,
        k_address,
        v_address,
        table_address,
        lengths_address,
        cum_address,
        slopes_address,
        spans,
        strides,
        sizes,
        scale,
        prefill,
        has_alibi,
        block_tokens,
        long_tokens,
        serial_elements,
        split_tasks,
        report,
    ):
        o = element_array(out_address, spans[0], storage)
        q = element_array(q_address, spans[1], storage)
        k = element_array(k_address, spans[2], storage)
        v = element_array(v_address, spans[3], storage)
        table = element_array(table_address, spans[4], table_storage)
        lengths = element_array(lengths_address, spans[5], lengths_storage)
        cum = element_array(cum_address, spans[6], cum_storage)
        slopes = element_array(slopes_address, spans[7], np.float32)
        seqs, tokens, heads, kv_heads = sizes[0], sizes[1], sizes[2], sizes[3]
        features, window = sizes[4], sizes[8]
        block_size, max_blocks, blocks = sizes[5], sizes[6], sizes[7]
        t_row, t_col, len_step, cum_step = (
            strides[14],
            strides[15],
            strides[16],
            strides[17],
        )
        capacity = max_blocks * block_size

        # Index checks, and the task list (sequence, first query token).
        entries = 0
        for s in range(seqs):
            n = np.int64(lengths[s * len_step])
            if n < 0 or n > capacity:
                report[0], report[1], report[2] = s, 0, n
                return 1
            if prefill:
                start = np.int64(cum[s * cum_step])
                stop = np.int64(cum[(s + 1) * cum_step])
                if s == 0 and start != 0:
                    report[0], report[1], report[2] = 0, 0, start
                    return 3
                if stop < start:
                    report[0], report[1], report[2] = s, 0, stop
                    return 4
                if stop - start > n:
                    report[0], report[1], report[2] = s, stop - start, n
                    return 6
                if stop - start < long_tokens:
                    entries += (stop - start + block_tokens - 1) // block_tokens
            else:
                entries += _decode_splits(n, window, seqs * kv_heads, split_tasks)
            for c in range((n + block_size - 1) // block_size):
                index = np.int64(table[s * t_row + c * t_col])
                if index < 0 or index >= blocks:
                    report[0], report[1], report[2] = s, c, index
                    return 2
        if prefill and seqs > 0 and np.int64(cum[seqs * cum_step]) != tokens:
            report[0], report[1], report[2] = seqs, 0, np.int64(cum[seqs * cum_step])
            return 5
        # Per entry: sequence, first query token, keys in the sequence, its
        # span of query tokens, the range of keys the entry reads and the
        # slot of its partial results (-1: none, it writes `out`), so that
        # the task body reads no index tensor but the block table. `keys`:
        # the keys the tasks read (per kv head; an upper bound under a
        # sliding window).
        entry_info = np.empty((entries, 8), np.int64)
        entry = 0
        keys = 0
        slots = 0
        for s in range(seqs):
            n = np.int64(lengths[s * len_step])
            if prefill:
                start = np.int64(cum[s * cum_step])
                stop = np.int64(cum[(s + 1) * cum_step])
                if stop - start >= long_tokens:
                    continue
                splits = 1
            else:
                start, stop = s, s + 1
                splits = _decode_splits(n, window, seqs * kv_heads, split_tasks)
            # A decode token sees the keys from `low` on (its window).
            low = max(n - window, 0) if window > 0 and not prefill else 0
            keys += n
            for t in range(start, stop, block_tokens):
                for part in range(splits):
                    entry_info[entry, 0] = s
                    entry_info[entry, 1] = t
                    entry_info[entry, 2] = n
                    entry_info[entry, 3] = start
                    entry_info[entry, 4] = stop
                    if splits == 1:
                        entry_info[entry, 5] = 0
                        entry_info[entry, 6] = n
                        entry_info[entry, 7] = -1
                    else:
                        entry_info[entry, 5] = low + (n - low) * part // splits
                        entry_info[entry, 6] = low + (n - low) * (part + 1) // splits
                        entry_info[entry, 7] = slots
                        slots += 1
                    entry += 1
        # Partial results of split entries: per slot and kv head, each query
        # head's running maximum, sum and unnormalised output.
        group = heads // kv_heads
        partial_max = np.empty((max(slots, 1) * kv_heads, group), np.float32)
        partial_sum = np.empty((max(slots, 1) * kv_heads, group), np.float32)
        partial_acc = np.empty((max(slots, 1) * kv_heads, group, features), np.float32)
        partials = (partial_max, partial_sum, partial_acc)

        factor = np.float32(scale)
        tasks = entries * kv_heads
        if keys * kv_heads * sizes[4] <= serial_elements:
            # Small work (a few short decode sequences) runs on the calling
            # thread: waking the pool would cost more than the work.
            operands = (o, q, k, v, table, slopes, entry_info, sizes, strides)
            for task in range(tasks):
                body(
                    task,
                    *operands,
                    factor,
                    has_alibi,
                    block_tokens,
                    partial_max,
                    partial_sum,
                    partial_acc,
                )
            merge_splits(o, entry_info, partials, sizes, strides, store)
            return 0
        # `np.int64`: inside the parfor the index is unsigned, and the body
        # would be compiled a second time for it.
        for task in prange(tasks):
            body(
                np.int64(task),
                o,
                q,
                k,
                v,
                table,
                slopes,
                entry_info,
                sizes,
                strides,
                factor,
                has_alibi,
                block_tokens,
                partial_max,
                partial_sum,
                partial_acc,
            )
        merge_splits(o, entry_info, partials, sizes, strides, store)
        return 0

    return kernel(run, parallel=True)


# Decode keys per split at the least: two tiles, so that the merge and the
# extra task cost little next to a split's work.
SPLIT_MIN_KEYS = 2 * KEY_TILE


@helper
def _decode_splits(n, window, tasks, split_tasks):
    """Into how many ranges of keys a decode sequence's tasks are split:
    enough for about `split_tasks` tasks in all (`tasks` before splitting),
    each of at least `SPLIT_MIN_KEYS` of the keys it sees."""
    visible = min(n, window) if window > 0 else n
    wanted = (split_tasks + tasks - 1) // tasks
    return max(1, min(wanted, visible // SPLIT_MIN_KEYS))


@helper
def merge_splits(o, entry_info, partials, sizes, strides, store):
    """Writes the output of every decode sequence whose keys were split:
    the partial softmax states of its entries merged (each rescaled to the
    largest maximum)."""
    partial_max, partial_sum, partial_acc = partials
    heads, kv_heads, features = sizes[2], sizes[3], sizes[4]
    o_tok, o_head, o_col = strides[3], strides[4], strides[5]
    group = heads // kv_heads
    entries = entry_info.shape[0]
    # Allocated once and cleared by a loop: inside a `parallel=True` kernel
    # `np.zeros` becomes a parallel region of its own (measured: 16 µs of
    # merging for 9 heads, as much as the attention of 256 keys).
    result = np.empty(features, np.float32)
    e = 0
    while e < entries:
        last = e + 1
        if entry_info[e, 7] < 0:
            e = last
            continue
        while (
            last < entries
            and entry_info[last, 7] >= 0
            and entry_info[last, 0] == entry_info[e, 0]
            and entry_info[last, 1] == entry_info[e, 1]
        ):
            last += 1
        token = entry_info[e, 1]
        for g in range(kv_heads):
            for h in range(group):
                best = np.float32(-np.inf)
                for f in range(e, last):
                    best = max(best, partial_max[entry_info[f, 7] * kv_heads + g, h])
                total = np.float32(0)
                for d in range(features):
                    result[d] = 0
                if best != -np.inf:
                    for f in range(e, last):
                        slot = entry_info[f, 7] * kv_heads + g
                        if partial_max[slot, h] == -np.inf:
                            continue
                        weight = exp_float32(partial_max[slot, h] - best)
                        total += partial_sum[slot, h] * weight
                        for d in range(features):
                            result[d] += partial_acc[slot, h, d] * weight
                inverse = np.float32(1) / total if total > 0 else np.float32(0)
                base = token * o_tok + (g * group + h) * o_head
                store_output_row(o, base, o_col, result, features, inverse, store)
        e = last


@cache
def paged_task_kernel(dtype: str):
    """One task of `paged_attention_kernel`: (entry, kv head), an entry
    being ``(sequence, first query token, keys, span start, span stop)`` in
    `entry_info`. Compiled apart from the parallel driver (keyed on the
    operand dtype only), so the parallel passes see a one-call loop."""
    load, store = loader(dtype), storer(dtype)

    def task_body(
        task,
        o,
        q,
        k,
        v,
        table,
        slopes,
        entry_info,
        sizes,
        strides,
        factor,
        has_alibi,
        block_tokens,
        partial_max,
        partial_sum,
        partial_acc,
    ):
        heads, kv_heads = sizes[2], sizes[3]
        features, block_size, window = sizes[4], sizes[5], sizes[8]
        q_tok, q_head, q_col = strides[0], strides[1], strides[2]
        o_tok, o_head, o_col = strides[3], strides[4], strides[5]
        k_block, k_head, k_slot, k_col = strides[6], strides[7], strides[8], strides[9]
        v_block, v_head, v_slot, v_col = (
            strides[10],
            strides[11],
            strides[12],
            strides[13],
        )
        t_row, t_col, slope_step = strides[14], strides[15], strides[18]
        group = heads // kv_heads
        e = task // kv_heads
        g = task - e * kv_heads
        s, first, n = entry_info[e, 0], entry_info[e, 1], entry_info[e, 2]
        span_start, span_stop = entry_info[e, 3], entry_info[e, 4]
        key_low, key_high = entry_info[e, 5], entry_info[e, 6]
        partial = entry_info[e, 7]
        count_tokens = min(block_tokens, span_stop - first)
        # Position of query token `first` in its sequence.
        position = n - (span_stop - span_start) + (first - span_start)
        rows = count_tokens * group
        queries = np.empty((rows, features), np.float32)
        key_tile = np.empty((KEY_TILE, features), np.float32)
        value_tile = np.empty((KEY_TILE, features), np.float32)
        scores = np.empty((rows, KEY_TILE), np.float32)
        maxima = np.full(rows, -np.inf, np.float32)
        sums = np.zeros(rows, np.float32)
        acc = np.zeros((rows, features), np.float32)
        for t in range(count_tokens):
            for h in range(group):
                base = (first + t) * q_tok + (g * group + h) * q_head
                load_query_row(
                    queries, t * group + h, features, q, base, q_col, load, factor
                )
        end = min(position + count_tokens, key_high)
        # With a sliding window, keys before the first token's window are
        # never read (decode reads `window` keys, not the whole sequence).
        begin = max(position + 1 - window, 0) if window > 0 else 0
        begin = max(begin, key_low)
        # Keys of a page whose rows lie end to end (the usual layout) are
        # copied as one run of elements: four times faster than row by row.
        runs = k_col == 1 and v_col == 1 and k_slot == features and v_slot == features
        key_flat = key_tile.reshape(KEY_TILE * features)
        value_flat = value_tile.reshape(KEY_TILE * features)
        for start in range(begin, end, KEY_TILE):
            count = min(KEY_TILE, end - start)
            # One division per tile (a 64-bit division per key cost as much
            # as the key's products); then page by page.
            page = start // block_size
            within = start - page * block_size
            j = 0
            while j < count:
                block = np.int64(table[s * t_row + page * t_col])
                run = min(block_size - within, count - j)
                k_base = block * k_block + g * k_head + within * k_slot
                v_base = block * v_block + g * v_head + within * v_slot
                if runs:
                    elements = run * features
                    load_run(key_flat, j * features, elements, k, k_base, load)
                    load_run(value_flat, j * features, elements, v, v_base, load)
                else:
                    for r in range(run):
                        load_tile_row(
                            key_tile, j + r, features, k, k_base + r * k_slot,
                            k_col, load,
                        )  # fmt: skip
                        load_tile_row(
                            value_tile, j + r, features, v, v_base + r * v_slot,
                            v_col, load,
                        )  # fmt: skip
                j += run
                page += 1
                within = 0
            tile_scores(queries, key_tile, scores, rows, count, features)
            for t in range(count_tokens):
                limit = position + t  # the last key this token sees
                # Keys before `low` are outside the token's window.
                low = min(max(limit + 1 - window - start, 0), count)
                if window <= 0:
                    low = 0
                for h in range(group):
                    r = t * group + h
                    if has_alibi:
                        slope = slopes[(g * group + h) * slope_step]
                        for j in range(count):
                            scores[r, j] += slope * np.float32(start + j - limit)
                    for j in range(max(limit + 1 - start, 0), count):
                        scores[r, j] = -np.inf
                    for j in range(low):
                        scores[r, j] = -np.inf
            tile_softmax(scores, rows, count, maxima, sums, acc, features)
            tile_accumulate(scores, value_tile, acc, rows, count, features)
        if partial >= 0:
            # One range of a split decode token's keys: the softmax state,
            # merged with the other ranges' by `merge_splits`.
            row = partial * kv_heads + g
            for h in range(group):
                partial_max[row, h] = maxima[h]
                partial_sum[row, h] = sums[h]
                for d in range(features):
                    partial_acc[row, h, d] = acc[h, d]
            return
        for t in range(count_tokens):
            for h in range(group):
                r = t * group + h
                base = (first + t) * o_tok + (g * group + h) * o_head
                inverse = np.float32(1) / sums[r] if sums[r] > 0 else np.float32(0)
                store_output_row(o, base, o_col, acc[r], features, inverse, store)

    # The driver captures this body, and the on-disk cache keys captured
    # functions on their qualified names: make the name say the dtype.
    task_body.__qualname__ += f"[{dtype}]"
    return kernel(task_body, fastmath={"reassoc", "contract"})


def overlaps(out, out_span: int, inputs) -> bool:
    """Whether `out` (a tensor reaching `out_span` elements) overlaps any of
    `inputs` (``(tensor, span)`` pairs, `None` tensors skipped)."""
    if out_span == 0:
        return False
    start = out.data_ptr()
    end = start + out_span * out.element_size()
    for tensor, extent in inputs:
        if tensor is None or extent == 0:
            continue
        other = tensor.data_ptr()
        if other < end and start < other + extent * tensor.element_size():
            return True
    return False


def staging_buffer(out):
    import torch

    return torch.empty_strided(
        out.shape, out.stride(), dtype=out.dtype, device=out.device
    )


class PagedAttentionLaunch:
    """Plans and launches `paged_attention_kernel`; mixed into the decode and
    prefill implementations after their base has validated the arguments
    (`self.seqs`, `self.heads`, ... come from `PagedAttentionChecks`)."""

    # Query rows per task: tokens x query heads of one kv head.
    TASK_ROWS = 32

    def plan(self, args, prefill: bool) -> None:
        from infini.ops.core.geometry import span

        q, k_cache, v_cache = args.q, args.k_cache, args.v_cache
        tables, lengths, out = args.block_tables, args.seq_lens, args.out
        cum = args.cum_seq_lens_q if prefill else None
        slopes = args.alibi_slopes
        self.prefill = prefill
        self.has_alibi = slopes is not None
        metas = (q, k_cache, v_cache, tables, lengths, cum, slopes)
        self.spans = np.array(
            [span(out.shape, out.strides)]
            + [0 if m is None else span(m.shape, m.strides) for m in metas],
            dtype=np.int64,
        )
        self.out_span = int(self.spans[0])
        self.input_spans = tuple(int(x) for x in self.spans[1:4])
        self.strides = np.array(
            list(q.strides)
            + list(out.strides)
            + list(k_cache.strides)
            + list(v_cache.strides)
            + list(tables.strides)
            + [lengths.strides[0], cum.strides[0] if cum is not None else 0]
            + [slopes.strides[0] if slopes is not None else 0],
            dtype=np.int64,
        )
        self.sizes = np.array(
            [
                self.seqs,
                self.tokens,
                self.heads,
                self.kv_heads,
                self.head_size,
                self.block_size,
                self.max_blocks,
                self.blocks,
                self.window,
            ],
            dtype=np.int64,
        )
        group = self.heads // self.kv_heads
        self.block_tokens = max(1, self.TASK_ROWS // group)
        # Decode tasks wanted in all: a few sequences' (sequence, kv head)
        # tasks are split over ranges of keys until every thread has two.
        self.split_tasks = 0 if prefill else 2 * numba.get_num_threads()
        # Output, query and caches found apart (`run`).
        self.apart = KnownAddresses()
        self.kernel = paged_attention_kernel(
            q.dtype,
            tables.dtype,
            lengths.dtype,
            cum.dtype if cum is not None else "int32",
        )

    def run(self, q, k_cache, v_cache, tables, lengths, cum, slopes, out) -> None:
        if self.seqs == 0:
            return
        target = out
        addresses = (
            out.data_ptr(),
            q.data_ptr(),
            k_cache.data_ptr(),
            v_cache.data_ptr(),
        )
        if addresses not in self.apart:
            inputs = zip((q, k_cache, v_cache), self.input_spans)
            if overlaps(out, self.out_span, inputs):
                target = staging_buffer(out)
                addresses = (target.data_ptr(), *addresses[1:])
            else:
                self.apart.remember(addresses)
        report = np.zeros(3, np.int64)
        code = self.kernel(
            *self._arguments(addresses, tables, lengths, cum, slopes, report)
        )
        if code:
            raise self.index_error(int(code), *(int(x) for x in report))
        if self.prefill and self.tokens >= PAGED_BLAS_TOKENS:
            self._run_long(q, k_cache, v_cache, tables, lengths, cum, slopes, target)
        if target is not out:
            out.copy_(target)

    def bind(self, q, k_cache, v_cache, tables, lengths, cum, slopes, out):
        """`run` with its arguments fixed (`Operator.bind_launch`), or `None`
        where the output needs staging or long prefill sequences run
        outside the kernel."""
        if self.seqs == 0:
            return do_nothing
        addresses = (
            out.data_ptr(),
            q.data_ptr(),
            k_cache.data_ptr(),
            v_cache.data_ptr(),
        )
        if addresses not in self.apart or (
            self.prefill and self.tokens >= PAGED_BLAS_TOKENS
        ):
            return None
        report = np.zeros(3, np.int64)
        arguments = self._arguments(addresses, tables, lengths, cum, slopes, report)
        entry = compiled_entry(self.kernel, arguments)
        index_error = self.index_error

        def launch() -> None:
            code = entry(*arguments)
            if code:
                raise index_error(int(code), *(int(x) for x in report))

        launch.kernel = self.kernel
        return launch

    def _arguments(self, addresses, tables, lengths, cum, slopes, report) -> tuple:
        """The kernel's arguments: `addresses` are the output's, the
        query's and the caches'; the kernel reports a bad index in
        `report`."""
        return (
            *addresses,
            tables.data_ptr(),
            lengths.data_ptr(),
            cum.data_ptr() if cum is not None else 0,
            slopes.data_ptr() if slopes is not None else 0,
            self.spans,
            self.strides,
            self.sizes,
            self.scale,
            self.prefill,
            self.has_alibi,
            self.block_tokens,
            PAGED_BLAS_TOKENS if self.prefill else self.tokens + 1,
            SERIAL_KEY_ELEMENTS,
            self.split_tasks,
            report,
        )

    def _run_long(self, q, k_cache, v_cache, tables, lengths, cum, slopes, out):
        """The sequences with `PAGED_BLAS_TOKENS` query tokens or more (the
        kernel skipped them, after checking every index): their pages are
        gathered into float32 keys and values, and the products run as GEMMs
        in blocks of query tokens, as in `scaled_dot_product_attention`.

        With a bfloat16 cache on a CPU that multiplies bfloat16 matrices
        natively, the probabilities times the values run in bfloat16 (the
        probabilities rounded once, float32 sums, as torch's own CPU
        attention does): a fourth of that product's time. The scores stay
        float32: rounding them would shift every probability."""
        import torch

        sixteen_bit = v_cache.dtype == torch.bfloat16 and (
            has_sixteen_bit_instructions("bfloat16")
        )

        starts = cum.tolist()
        sizes = lengths.tolist()
        kv_heads, group = self.kv_heads, self.heads // self.kv_heads
        head_size, block_size = self.head_size, self.block_size
        window = self.window
        probabilities = probability_kernel()
        alibi = slopes is not None
        slope_values = np.ascontiguousarray(slopes.numpy()) if alibi else NO_SLOPES
        offsets = np.zeros((2, self.heads), np.int64)
        for s in range(self.seqs):
            start, stop, n = starts[s], starts[s + 1], sizes[s]
            count = stop - start
            if count < PAGED_BLAS_TOKENS:
                continue
            pages = tables[s, : -(-n // block_size)].long()
            keys = k_cache[pages].transpose(0, 1).reshape(kv_heads, -1, head_size)
            values = v_cache[pages].transpose(0, 1).reshape(kv_heads, -1, head_size)
            keys = keys[:, :n].to(torch.float32)
            values = values[:, :n] if sixteen_bit else values[:, :n].to(torch.float32)
            queries = q[start:stop].to(torch.float32) * self.scale
            # (kv heads, group, tokens, head size): a kv head's query heads
            # become rows of one matrix.
            queries = queries.permute(1, 0, 2).reshape(
                kv_heads, group, count, head_size
            )
            shift = n - count
            for first in range(0, count, PAGED_BLAS_BLOCK):
                last = min(count, first + PAGED_BLAS_BLOCK)
                rows = last - first
                end = shift + last
                # Under a sliding window the block's keys start at the first
                # token's window: keys `low..end`, positions relative to `low`.
                low = max(shift + first + 1 - window, 0) if window > 0 else 0
                block = queries[:, :, first:last].reshape(
                    kv_heads, group * rows, head_size
                )
                scores = torch.matmul(block, keys[:, low:end].transpose(1, 2))
                if window > 0:
                    # Query row `r` (position `shift + first + r`) sees keys
                    # `j` of the slice with ``j + low > position - window``.
                    row = torch.arange(rows).view(rows, 1)
                    column = torch.arange(end - low).view(1, end - low)
                    outside = column + low <= row + shift + first - window
                    scores.view(kv_heads, group, rows, end - low).masked_fill_(
                        outside, -np.inf
                    )
                rounded = NO_ROUNDED
                if sixteen_bit:
                    weights = torch.empty(scores.shape, dtype=torch.bfloat16)
                    rounded = weights.view(torch.uint16).numpy()
                    rounded = rounded.reshape(self.heads, rows, end - low)
                probabilities(
                    scores.numpy().reshape(self.heads, rows, end - low),
                    0,
                    0,
                    0,
                    0,
                    slope_values,
                    offsets,
                    first,
                    shift - low,
                    0,
                    0,
                    end - low,
                    True,
                    False,
                    False,
                    alibi,
                    rounded,
                    sixteen_bit,
                )
                result = torch.matmul(
                    weights if sixteen_bit else scores, values[:, low:end]
                )
                out[start + first : start + last] = result.view(
                    self.heads, rows, head_size
                ).transpose(0, 1)
