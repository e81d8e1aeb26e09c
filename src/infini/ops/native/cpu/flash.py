"""Kernels of the flash-attention operators (`flash_attn_varlen_func`,
`flash_attn_with_kvcache`, `flash_attention`).

One online-softmax kernel serves the three: per sequence, queries come
either packed (rows ``cu_seqlens_q[s]..`` of a ``(tokens, heads, dim)``
tensor) or batched (``(batch, seqlen, heads, dim)``), and keys come packed
(``cu_seqlens_k``), from a dense cache (``(batch, capacity, kv_heads,
dim)``, optionally through `cache_batch_idx`) or from a paged cache through
a block table. The tile stages (products, running softmax, accumulation)
are those of `attention.py`; what this module adds is the masking of
flash-attn (bottom-right causal alignment, sliding window, ALiBi as
``-slope * |distance|``, softcap), the log-sum-exp output, rotary embedding
of the queries and of keys appended to a cache, and a scan of every index
tensor that reports the first bad value before anything is written.

A task is (sequence, kv head, block of query tokens); its rows are those
tokens times the query heads of the kv head, so that every key and value
tile is converted to float32 once for the GQA group. Its keys are only those
its window can see, walked once in tiles of `KEY_TILE`.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from .attention import (
    KEY_TILE,
    load_tile_row,
    tile_accumulate,
    tile_scores,
    tile_softmax,
)
from .dtype_io import loader, storer
from .jit import helper, kernel
from .memory import STORAGE, element_array

# Query rows (tokens x heads of a GQA group) per task.
TASK_ROWS = 32

# Positions in the int64 `plan` array (`FlashPlan.plan`).
(
    SEQS,
    HEADS,
    KV_HEADS,
    FEATURES,
    VALUE_FEATURES,
    Q_PACKED,
    Q_LEN,
    Q_ROWS,
    Q_TOK,
    Q_HEAD,
    Q_COL,
    Q_BATCH,
    O_TOK,
    O_HEAD,
    O_COL,
    O_BATCH,
    HAS_LSE,
    L_TOK,
    L_HEAD,
    L_BATCH,
    K_MODE,
    K_ROWS,
    K_ROW,
    K_HEAD,
    K_COL,
    K_BATCH,
    V_ROW,
    V_HEAD,
    V_COL,
    V_BATCH,
    CACHE_ENTRIES,
    BLOCK_SIZE,
    T_ROW,
    T_COL,
    MAX_BLOCKS,
    LEN_MODE,
    SEQLENS_STEP,
    HAS_BATCH_INDEX,
    BATCH_INDEX_STEP,
    HAS_LEFTPAD,
    LEFTPAD_STEP,
    NEW,
    KN_BATCH,
    KN_TOK,
    KN_HEAD,
    KN_COL,
    VN_BATCH,
    VN_TOK,
    VN_HEAD,
    VN_COL,
    LEFT,
    RIGHT,
    HAS_ALIBI,
    SLOPE_BATCH,
    SLOPE_HEAD,
    ROTARY_HALF,
    ROTARY_INTERLEAVED,
    ROTARY_Q_PER_TOKEN,
    ROTARY_ROWS,
    COS_ROW,
    COS_COL,
    SIN_ROW,
    SIN_COL,
    MAX_Q,
    MAX_K,
    BLOCK_TOKENS,
    CU_Q_STEP,
    CU_K_STEP,
    PLAN_SIZE,
) = range(69)

# Where the keys of a sequence live (`plan[K_MODE]`).
KEYS_PACKED = 0  # rows ``cu_seqlens_k[s] + position`` of a packed tensor
KEYS_DENSE = 1  # row `position` of cache entry `s` (or `cache_batch_idx[s]`)
KEYS_PAGED = 2  # through the block table

# How many keys a sequence has (`plan[LEN_MODE]`).
LENGTHS_FROM_CU = 0  # ``cu_seqlens_k[s + 1] - cu_seqlens_k[s]``
LENGTHS_SCALAR = 1  # the call's integer `cache_seqlens` (+ appended keys)
LENGTHS_TENSOR = 2  # ``cache_seqlens[s]`` (+ appended keys)
LENGTHS_FULL = 3  # the whole capacity

# Operand positions in the `addresses` and `spans` arrays.
(
    OUT,
    QUERY,
    KEY,
    VALUE,
    LSE,
    TABLE,
    CU_Q,
    CU_K,
    SEQLENS,
    BATCH_INDEX,
    LEFTPAD,
    SLOPES,
    COS,
    SIN,
    KEY_NEW,
    VALUE_NEW,
    OPERANDS,
) = range(17)

# Codes of the index scan (0: everything in range); `report` then holds
# ``(sequence, position, value, limit)``.
BAD_CU_Q = 1
CU_Q_PAST_END = 2
BAD_CU_K = 3
CU_K_PAST_END = 4
QUERY_TOO_LONG = 5
KEYS_TOO_LONG = 6
BAD_SEQLEN = 7
BAD_BATCH_INDEX = 8
BAD_LEFTPAD = 9
BAD_BLOCK = 10
ROTARY_TOO_SHORT = 11
BAD_KEY_COUNT = 12

# Per-sequence facts the scan computes (`seq_info` columns).
(
    INFO_Q_LEN,
    INFO_Q_ROW,
    INFO_K_END,
    INFO_K_START,
    INFO_K_ROW,
    INFO_K_ENTRY,
    INFO_BASE,
    INFO_COLUMNS,
) = range(8)


@helper
def rotate_row(row, cos, sin, cos_base, cos_col, sin_base, sin_col, half, pairs, load):
    """Rotates the first ``2 * half`` elements of a float32 row in place by
    the angles of one position: pairs ``(2i, 2i + 1)`` when `pairs`
    (interleaved), else ``(i, i + half)`` (GPT-NeoX)."""
    for i in range(half):
        c = np.float32(load(cos, cos_base + i * cos_col))
        s = np.float32(load(sin, sin_base + i * sin_col))
        if pairs:
            first, second = 2 * i, 2 * i + 1
        else:
            first, second = i, i + half
        a, b = row[first], row[second]
        row[first] = a * c - b * s
        row[second] = b * c + a * s


@helper
def key_address(position, entry, row0, table, plan, head, row_step, head_step, batch):
    """The element offset of key (or value) `position` of a sequence, head
    `head`: through the block table (row `entry`) when paged, else row
    ``row0 + position`` of cache entry `entry` (`batch` is its step)."""
    if plan[K_MODE] == KEYS_PAGED:
        size = plan[BLOCK_SIZE]
        column = position // size
        block = np.int64(table[entry * plan[T_ROW] + column * plan[T_COL]])
        within = position - column * size
        return block * batch + within * row_step + head * head_step
    return entry * batch + (row0 + position) * row_step + head * head_step


@cache
def flash_task_kernel(dtype: str):
    """One task of `flash_attention_kernel` (sequence, kv head, block of
    query tokens). Compiled apart from the parallel driver, keyed on the
    operand dtype only."""
    load, store = loader(dtype), storer(dtype)

    def task_body(
        task, o, q, k, v, lse, table, cos, sin, slopes, info, entries, plan, scale,
        softcap,
    ):  # fmt: skip
        heads, kv_heads = plan[HEADS], plan[KV_HEADS]
        features, value_features = plan[FEATURES], plan[VALUE_FEATURES]
        group = heads // kv_heads
        e = task // kv_heads
        g = task - e * kv_heads
        s, first = entries[e, 0], entries[e, 1]
        q_len, q_row = info[s, INFO_Q_LEN], info[s, INFO_Q_ROW]
        k_end, k_start = info[s, INFO_K_END], info[s, INFO_K_START]
        k_row, k_entry = info[s, INFO_K_ROW], info[s, INFO_K_ENTRY]
        base = info[s, INFO_BASE]
        tokens = min(plan[BLOCK_TOKENS], q_len - first)
        rows = tokens * group
        # Query token `t` sits at key position ``t + shift`` (bottom-right).
        shift = k_end - q_len
        left, right = plan[LEFT], plan[RIGHT]
        half = plan[ROTARY_HALF]
        queries = np.empty((rows, features), np.float32)
        key_tile = np.empty((KEY_TILE, features), np.float32)
        value_tile = np.empty((KEY_TILE, value_features), np.float32)
        scores = np.empty((rows, KEY_TILE), np.float32)
        maxima = np.full(rows, -np.inf, np.float32)
        sums = np.zeros(rows, np.float32)
        acc = np.zeros((rows, value_features), np.float32)
        factor = np.float32(scale)
        for t in range(tokens):
            token = first + t
            token_base = (q_row + token) * plan[Q_TOK] + s * plan[Q_BATCH]
            position = base + (token if plan[ROTARY_Q_PER_TOKEN] else 0)
            for h in range(group):
                r = t * group + h
                address = token_base + (g * group + h) * plan[Q_HEAD]
                load_tile_row(queries, r, features, q, address, plan[Q_COL], load)
                row = queries[r]
                if half > 0:
                    rotate_row(
                        row, cos, sin, position * plan[COS_ROW], plan[COS_COL],
                        position * plan[SIN_ROW], plan[SIN_COL], half,
                        plan[ROTARY_INTERLEAVED], load,
                    )  # fmt: skip
                for d in range(features):
                    row[d] *= factor
        lo, hi = k_start, k_end
        if left >= 0:
            lo = max(lo, first + shift - left)
        if right >= 0:
            hi = min(hi, first + tokens - 1 + shift + right + 1)
        cap = np.float32(softcap)
        for start in range(lo, hi, KEY_TILE):
            count = min(KEY_TILE, hi - start)
            for j in range(count):
                address = key_address(
                    start + j, k_entry, k_row, table, plan, g, plan[K_ROW],
                    plan[K_HEAD], plan[K_BATCH],
                )  # fmt: skip
                load_tile_row(key_tile, j, features, k, address, plan[K_COL], load)
            tile_scores(queries, key_tile, scores, rows, count, features)
            for t in range(tokens):
                query_position = first + t + shift
                row_lo, row_hi = k_start, k_end
                if left >= 0:
                    row_lo = max(row_lo, query_position - left)
                if right >= 0:
                    row_hi = min(row_hi, query_position + right + 1)
                for h in range(group):
                    r = t * group + h
                    if cap > 0:
                        for j in range(count):
                            scores[r, j] = cap * np.tanh(scores[r, j] / cap)
                    if plan[HAS_ALIBI]:
                        slope = slopes[
                            s * plan[SLOPE_BATCH] + (g * group + h) * plan[SLOPE_HEAD]
                        ]
                        for j in range(count):
                            scores[r, j] -= slope * np.float32(
                                abs(start + j - query_position)
                            )
                    for j in range(min(count, max(row_lo - start, 0))):
                        scores[r, j] = -np.inf
                    for j in range(max(row_hi - start, 0), count):
                        scores[r, j] = -np.inf
            tile_softmax(scores, rows, count, maxima, sums, acc, value_features)
            for j in range(count):
                address = key_address(
                    start + j, k_entry, k_row, table, plan, g, plan[V_ROW],
                    plan[V_HEAD], plan[V_BATCH],
                )  # fmt: skip
                load_tile_row(
                    value_tile, j, value_features, v, address, plan[V_COL], load
                )
            tile_accumulate(scores, value_tile, acc, rows, count, value_features)
        for t in range(tokens):
            token = first + t
            for h in range(group):
                r = t * group + h
                head = g * group + h
                address = (
                    (q_row + token) * plan[O_TOK]
                    + s * plan[O_BATCH]
                    + head * plan[O_HEAD]
                )
                total = sums[r]
                inverse = np.float32(1) / total if total > 0 else np.float32(0)
                for d in range(value_features):
                    store(o, address + d * plan[O_COL], acc[r, d] * inverse)
                if plan[HAS_LSE]:
                    at = (
                        (q_row + token) * plan[L_TOK]
                        + s * plan[L_BATCH]
                        + head * plan[L_HEAD]
                    )
                    lse[at] = maxima[r] + np.log(total) if total > 0 else -np.inf

    # The driver captures this body, and the on-disk cache keys captured
    # functions on their qualified names: make the name say the dtype.
    task_body.__qualname__ += f"[{dtype}]"
    return kernel(task_body, fastmath={"reassoc", "contract"})


@cache
def flash_append_kernel(dtype: str):
    """Writes appended token `t` of sequence `s` (task ``s * new + t``) into
    the key and value caches at position ``cache_seqlens[s] + t``, the key
    rotated at that position when the plan has rotary embedding."""
    load, store = loader(dtype), storer(dtype)

    def append_body(task, k, v, k_new, v_new, table, cos, sin, info, plan):
        new = plan[NEW]
        s = task // new
        t = task - s * new
        features, value_features = plan[FEATURES], plan[VALUE_FEATURES]
        position = info[s, INFO_BASE] + t
        entry, row0 = info[s, INFO_K_ENTRY], info[s, INFO_K_ROW]
        half = plan[ROTARY_HALF]
        buffer = np.empty((1, features), np.float32)
        row = buffer[0]
        for g in range(plan[KV_HEADS]):
            source = s * plan[KN_BATCH] + t * plan[KN_TOK] + g * plan[KN_HEAD]
            load_tile_row(buffer, 0, features, k_new, source, plan[KN_COL], load)
            if half > 0:
                rotate_row(
                    row, cos, sin, position * plan[COS_ROW], plan[COS_COL],
                    position * plan[SIN_ROW], plan[SIN_COL], half,
                    plan[ROTARY_INTERLEAVED], load,
                )  # fmt: skip
            target = key_address(
                position, entry, row0, table, plan, g, plan[K_ROW], plan[K_HEAD],
                plan[K_BATCH],
            )  # fmt: skip
            for d in range(features):
                store(k, target + d * plan[K_COL], row[d])
            source = s * plan[VN_BATCH] + t * plan[VN_TOK] + g * plan[VN_HEAD]
            target = key_address(
                position, entry, row0, table, plan, g, plan[V_ROW], plan[V_HEAD],
                plan[V_BATCH],
            )  # fmt: skip
            for d in range(value_features):
                v[target + d * plan[V_COL]] = v_new[source + d * plan[VN_COL]]

    append_body.__qualname__ += f"[{dtype}]"
    return kernel(append_body, fastmath={"reassoc", "contract"})


@cache
def flash_attention_kernel(dtype: str, cu_dtype: str = "int32"):
    """The driver: scans the index tensors (returning a nonzero code, with
    ``(sequence, position, value, limit)`` in `report`, before writing
    anything), appends new keys and values to the cache, then runs the
    tasks in parallel. `addresses` and `spans` hold the operands in the
    order `OUT`..`VALUE_NEW`; `cu_dtype` is the dtype of the cumulative
    lengths, every other index tensor is int32."""
    body = flash_task_kernel(dtype)
    append = flash_append_kernel(dtype)
    storage = STORAGE[dtype]
    cu_storage = STORAGE[cu_dtype]

    def run(addresses, spans, plan, scale, softcap, length_value, report):
        o = element_array(addresses[OUT], spans[OUT], storage)
        q = element_array(addresses[QUERY], spans[QUERY], storage)
        k = element_array(addresses[KEY], spans[KEY], storage)
        v = element_array(addresses[VALUE], spans[VALUE], storage)
        lse = element_array(addresses[LSE], spans[LSE], np.float32)
        table = element_array(addresses[TABLE], spans[TABLE], np.int32)
        cu_q = element_array(addresses[CU_Q], spans[CU_Q], cu_storage)
        cu_k = element_array(addresses[CU_K], spans[CU_K], cu_storage)
        seqlens = element_array(addresses[SEQLENS], spans[SEQLENS], np.int32)
        batch_index = element_array(
            addresses[BATCH_INDEX], spans[BATCH_INDEX], np.int32
        )
        leftpad = element_array(addresses[LEFTPAD], spans[LEFTPAD], np.int32)
        slopes = element_array(addresses[SLOPES], spans[SLOPES], np.float32)
        cos = element_array(addresses[COS], spans[COS], storage)
        sin = element_array(addresses[SIN], spans[SIN], storage)
        k_new = element_array(addresses[KEY_NEW], spans[KEY_NEW], storage)
        v_new = element_array(addresses[VALUE_NEW], spans[VALUE_NEW], storage)

        seqs, new, mode = plan[SEQS], plan[NEW], plan[K_MODE]
        block_tokens = plan[BLOCK_TOKENS]
        # Cleared by a loop: in a `parallel=True` kernel `np.zeros` would
        # be a parallel region of its own (see `attention.merge_splits`).
        info = np.empty((seqs, INFO_COLUMNS), np.int64)
        for s in range(seqs):
            for column in range(INFO_COLUMNS):
                info[s, column] = 0
        entries_count = 0
        for s in range(seqs):
            # Queries.
            if plan[Q_PACKED]:
                start = np.int64(cu_q[s * plan[CU_Q_STEP]])
                stop = np.int64(cu_q[(s + 1) * plan[CU_Q_STEP]])
                if start < 0:
                    report[0], report[2] = s, start
                    return BAD_CU_Q
                if stop < start:
                    report[0], report[2] = s + 1, stop
                    return BAD_CU_Q
                if stop > plan[Q_ROWS]:
                    report[0], report[2], report[3] = s + 1, stop, plan[Q_ROWS]
                    return CU_Q_PAST_END
                info[s, INFO_Q_ROW] = start
                q_len = stop - start
            else:
                q_len = plan[Q_LEN]
            if plan[MAX_Q] >= 0 and q_len > plan[MAX_Q]:
                report[0], report[2], report[3] = s, q_len, plan[MAX_Q]
                return QUERY_TOO_LONG
            info[s, INFO_Q_LEN] = q_len
            # Where the keys live.
            entry = s
            if plan[HAS_BATCH_INDEX]:
                entry = np.int64(batch_index[s * plan[BATCH_INDEX_STEP]])
                if entry < 0 or entry >= plan[CACHE_ENTRIES]:
                    report[0], report[2], report[3] = s, entry, plan[CACHE_ENTRIES]
                    return BAD_BATCH_INDEX
            info[s, INFO_K_ENTRY] = entry if mode != KEYS_PACKED else 0
            # How many keys.
            length_mode = plan[LEN_MODE]
            if length_mode == LENGTHS_FROM_CU:
                start = np.int64(cu_k[s * plan[CU_K_STEP]])
                stop = np.int64(cu_k[(s + 1) * plan[CU_K_STEP]])
                if start < 0:
                    report[0], report[2] = s, start
                    return BAD_CU_K
                if stop < start:
                    report[0], report[2] = s + 1, stop
                    return BAD_CU_K
                if mode == KEYS_PACKED:
                    if stop > plan[K_ROWS]:
                        report[0], report[2], report[3] = s + 1, stop, plan[K_ROWS]
                        return CU_K_PAST_END
                    info[s, INFO_K_ROW] = start
                elif stop - start > plan[K_ROWS]:
                    report[0], report[2], report[3] = s, stop - start, plan[K_ROWS]
                    return BAD_KEY_COUNT
                base = stop - start
            elif length_mode == LENGTHS_FULL:
                base = plan[K_ROWS]
            else:
                if length_mode == LENGTHS_SCALAR:
                    base = length_value
                else:
                    base = np.int64(seqlens[s * plan[SEQLENS_STEP]])
                if base < 0 or base + new > plan[K_ROWS]:
                    report[0], report[2], report[3] = s, base, plan[K_ROWS] - new
                    return BAD_SEQLEN
            k_end = base + new
            if plan[MAX_K] >= 0 and k_end > plan[MAX_K]:
                report[0], report[2], report[3] = s, k_end, plan[MAX_K]
                return KEYS_TOO_LONG
            k_start = 0
            if plan[HAS_LEFTPAD]:
                k_start = np.int64(leftpad[s * plan[LEFTPAD_STEP]])
                if k_start < 0 or k_start > base:
                    report[0], report[2], report[3] = s, k_start, base
                    return BAD_LEFTPAD
            info[s, INFO_BASE] = base
            info[s, INFO_K_END] = k_end
            info[s, INFO_K_START] = k_start
            if mode == KEYS_PAGED and k_end > k_start:
                size = plan[BLOCK_SIZE]
                for c in range(k_start // size, (k_end + size - 1) // size):
                    block = np.int64(table[s * plan[T_ROW] + c * plan[T_COL]])
                    if block < 0 or block >= plan[CACHE_ENTRIES]:
                        report[0], report[1] = s, c
                        report[2], report[3] = block, plan[CACHE_ENTRIES]
                        return BAD_BLOCK
            if plan[ROTARY_HALF] > 0:
                last = base + max(new, q_len if plan[ROTARY_Q_PER_TOKEN] else 1)
                if q_len + new > 0 and last > plan[ROTARY_ROWS]:
                    report[0], report[2], report[3] = s, last, plan[ROTARY_ROWS]
                    return ROTARY_TOO_SHORT
            entries_count += (q_len + block_tokens - 1) // block_tokens

        if new > 0:
            # `np.int64`: inside the parfor the index is unsigned, and the
            # body would be compiled a second time for it.
            for task in prange(seqs * new):
                append(np.int64(task), k, v, k_new, v_new, table, cos, sin, info, plan)

        entries = np.empty((entries_count, 2), np.int64)
        entry = 0
        for s in range(seqs):
            for first in range(0, info[s, INFO_Q_LEN], block_tokens):
                entries[entry, 0] = s
                entries[entry, 1] = first
                entry += 1
        for task in prange(entries_count * plan[KV_HEADS]):
            body(
                np.int64(task), o, q, k, v, lse, table, cos, sin, slopes, info,
                entries, plan, scale, softcap,
            )  # fmt: skip
        return 0

    return kernel(run, parallel=True)


def index_error_text(code: int, report, names: dict) -> str:
    """The message for a nonzero scan `code`; `names` maps the roles
    ``cu_q``, ``cu_k``, ``seqlens``, ``batch_index``, ``leftpad``,
    ``table``, ``rotary``, ``max_q``, ``max_k``, ``q`` and ``k`` to the
    operator's parameter names."""
    s, position, value, limit = (int(x) for x in report)
    n = names
    messages = {
        BAD_CU_Q: f"`{n['cu_q']}[{s}]` is {value}; cumulative lengths must start "
        "at 0 or above and never decrease",
        CU_Q_PAST_END: f"`{n['cu_q']}[{s}]` is {value}, past the {limit} tokens of "
        f"`{n['q']}`",
        BAD_CU_K: f"`{n['cu_k']}[{s}]` is {value}; cumulative lengths must start "
        "at 0 or above and never decrease",
        CU_K_PAST_END: f"`{n['cu_k']}[{s}]` is {value}, past the {limit} tokens of "
        f"`{n['k']}`",
        QUERY_TOO_LONG: f"sequence {s} has {value} query tokens, more than "
        f"`{n['max_q']}` = {limit}",
        KEYS_TOO_LONG: f"sequence {s} has {value} keys, more than `{n['max_k']}` = "
        f"{limit}",
        BAD_SEQLEN: f"`{n['seqlens']}` of sequence {s} is {value}, out of the range "
        f"[0, {limit}] that the cache (and the appended keys) leave",
        BAD_BATCH_INDEX: f"`{n['batch_index']}[{s}]` is {value}, out of the range "
        f"[0, {limit}) of cache entries",
        BAD_LEFTPAD: f"`{n['leftpad']}[{s}]` is {value}, out of the range "
        f"[0, {limit}] (the sequence's cached length)",
        BAD_BLOCK: f"`{n['table']}[{s}, {position}]` is {value}, out of the range "
        f"[0, {limit}) of cache blocks",
        ROTARY_TOO_SHORT: f"sequence {s} needs rotary positions up to {value - 1} "
        f"but `{n['rotary']}` has {limit} rows",
        BAD_KEY_COUNT: f"sequence {s} has {value} keys (from `{n['cu_k']}`), more "
        f"than the {limit} its row of `{n['table']}` holds",
    }
    return messages[code] + "; nothing was written."


def empty_plan() -> np.ndarray:
    """A plan with every field 0 but the windows and bounds (unbounded)."""
    plan = np.zeros(PLAN_SIZE, np.int64)
    plan[LEFT] = plan[RIGHT] = -1
    plan[MAX_Q] = plan[MAX_K] = -1
    return plan


def block_tokens(heads: int, kv_heads: int) -> int:
    """Query tokens per task: `TASK_ROWS` rows of one GQA group."""
    return max(1, TASK_ROWS // max(1, heads // max(kv_heads, 1)))


class FlashLaunch:
    """Runs `flash_attention_kernel` from a plan; mixed into the three
    implementations, which fill `self.plan` (`empty_plan`), `self.spans`
    (int64, `OPERANDS` entries), `self.scale`, `self.softcap`,
    `self.kernel`, `self.index_names`, and call `launch_kernel` with the
    operands by position (`None` where absent)."""

    # Operands the output must not overlap (else it is computed into a
    # staging buffer and copied).
    READ_OPERANDS = (QUERY, KEY, VALUE, KEY_NEW, VALUE_NEW, COS, SIN)

    def launch_kernel(self, operands, length_value: int = 0) -> None:
        from .attention import overlaps, staging_buffer

        out = operands[OUT]
        target = out
        spans = self.spans
        if overlaps(
            out,
            int(spans[OUT]),
            ((operands[i], int(spans[i])) for i in self.READ_OPERANDS),
        ):
            target = staging_buffer(out)
            operands = list(operands)
            operands[OUT] = target
        addresses = np.array(
            [0 if tensor is None else tensor.data_ptr() for tensor in operands],
            dtype=np.int64,
        )
        report = np.zeros(4, np.int64)
        code = self.kernel(
            addresses,
            spans,
            self.plan,
            self.scale,
            self.softcap,
            length_value,
            report,
        )
        if code:
            raise self.error(index_error_text(int(code), report, self.index_names))
        if target is not out:
            out.copy_(target)
