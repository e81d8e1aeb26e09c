"""MoE routing kernels: top-k gating (`topk_softmax`, `topk_sigmoid`,
`topksoftmax_infinilm`), DeepSeek-style `grouped_topk`, `moe_sum` and
`moe_align_block_size`.

Gating kernels run over tokens (one row of expert scores each); a token's
scores are loaded into a float32 buffer, turned into probabilities, and the
top `topk` experts are kept in a small buffer sorted by rank (insertion, so a
row costs about one comparison per expert when `topk` is small). The rank
order is torch's: larger first, NaN above every number, ties to the lower
index.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from infini.ops.core.geometry import AliasGuard, span

from .activations import exp_float32, sigmoid
from .codes import (
    integer_code,
    load_integer,
    load_real,
    load_real_row,
    real_code,
    store_integer,
    store_real,
    store_real_row,
)
from .jit import chunk_kernels, helper, kernel
from .layout import staging_like
from .memory import element_array
from .numeric import bfloat16_bits_to_float32, float16_bits_to_float32

# Tokens x experts below which gating kernels run serially, and the work
# (tokens x experts) of one parallel chunk.
GATING_PARALLEL_THRESHOLD = 16384
GATING_CHUNK = 8192


def gating_chunks(tokens: int, row_work: int) -> int:
    """How many parallel chunks a kernel over `tokens` rows of `row_work`
    elements each should use (1: serial)."""
    total = tokens * max(row_work, 1)
    if tokens < 2 or total < GATING_PARALLEL_THRESHOLD:
        return 1
    return min(tokens, -(-total // GATING_CHUNK))


@helper
def ranks_before(a, index_a, b, index_b):
    """Whether `(a, index_a)` comes before `(b, index_b)` in torch's top-k
    order: larger first, NaN above every number, ties to the lower index."""
    if a != a:
        return b == b or index_a < index_b
    if b != b:
        return False
    return a > b or (a == b and index_a < index_b)


@helper
def insert_top(keys, indices, count, k, value, index):
    """Inserts `(value, index)` into the first `count` entries of `keys` and
    `indices` (kept in rank order, at most `k`) if it ranks among the top `k`;
    returns the new count. Indices must arrive in increasing order: an equal
    value then ranks below the kept one, so plain `>` decides (NaN keys,
    which rank above every number, compare false and are never passed)."""
    if value != value:
        # NaN ranks above every number and below earlier NaNs.
        position = count if count < k else k - 1
        if k == 0 or (count == k and keys[k - 1] != keys[k - 1]):
            return count
        if count < k:
            count += 1
        while position > 0 and keys[position - 1] == keys[position - 1]:
            keys[position] = keys[position - 1]
            indices[position] = indices[position - 1]
            position -= 1
        keys[position] = value
        indices[position] = index
        return count
    if count == k:
        if k == 0 or not value > keys[k - 1]:
            return count
        position = k - 1
    else:
        position = count
        count += 1
    while position > 0 and value > keys[position - 1]:
        keys[position] = keys[position - 1]
        indices[position] = indices[position - 1]
        position -= 1
    keys[position] = value
    indices[position] = index
    return count


def _topk_gating_chunk(chunk, chunks, arguments):
    (
        addresses,
        spans,
        codes,
        tokens,
        experts,
        topk,
        strides,
        softmax,
        renormalize,
        scale,
    ) = arguments
    # Operands: 0 weights, 1 ids, 2 token indices, 3 gating, 4 bias, 5 padding.
    w32 = element_array(addresses[0], spans[0], np.float32)
    w16 = element_array(addresses[0], spans[0], np.uint16)
    id32 = element_array(addresses[1], spans[1], np.int32)
    id64 = element_array(addresses[1], spans[1], np.int64)
    tk32 = element_array(addresses[2], spans[2], np.int32)
    tk64 = element_array(addresses[2], spans[2], np.int64)
    g32 = element_array(addresses[3], spans[3], np.float32)
    g16 = element_array(addresses[3], spans[3], np.uint16)
    b32 = element_array(addresses[4], spans[4], np.float32)
    b16 = element_array(addresses[4], spans[4], np.uint16)
    pad8 = element_array(addresses[5], spans[5], np.uint8)
    pad32 = element_array(addresses[5], spans[5], np.int32)
    pad64 = element_array(addresses[5], spans[5], np.int64)
    has_bias = addresses[4] != 0
    has_padding = codes[5] != 0
    has_token = codes[2] != 0
    factor = np.float32(scale)
    # Scalars read once: the compiler cannot keep array elements in registers
    # across stores to other arrays (they might alias).
    weight_code, id_code, token_code = codes[0], codes[1], codes[2]
    gating_code, bias_code, padding_code = codes[3], codes[4], codes[5]
    weight_row, weight_col = strides[0, 0], strides[0, 1]
    id_row, id_col = strides[1, 0], strides[1, 1]
    token_row, token_col = strides[2, 0], strides[2, 1]
    gating_row, gating_col = strides[3, 0], strides[3, 1]
    bias_step, padding_step = strides[4, 0], strides[5, 0]
    first = chunk * tokens // chunks
    last = (chunk + 1) * tokens // chunks
    scores = np.empty(experts, np.float32)
    bias = np.zeros(experts, np.float32)
    if has_bias:
        load_real_row(bias, experts, b32, b16, bias_code, 0, bias_step)
    keys = np.empty(max(topk, 1), np.float32)
    chosen = np.empty(max(topk, 1), np.int64)
    for t in range(first, last):
        load_real_row(
            scores, experts, g32, g16, gating_code, t * gating_row, gating_col
        )
        if softmax:
            maximum = np.float32(-np.inf)
            for e in range(experts):
                maximum = max(maximum, scores[e])
            total = np.float32(0.0)
            for e in range(experts):
                value = exp_float32(scores[e] - maximum)
                scores[e] = value
                total += value
            inverse = np.float32(1.0) / total
            for e in range(experts):
                scores[e] *= inverse
        else:
            for e in range(experts):
                scores[e] = sigmoid(scores[e])
        count = 0
        for e in range(experts):
            count = insert_top(keys, chosen, count, topk, scores[e] + bias[e], e)
        padded = False
        if has_padding:
            flag = load_integer(pad8, pad32, pad64, padding_code, t * padding_step)
            padded = flag != 0
        total = np.float32(0.0)
        for j in range(topk):
            total += scores[chosen[j]]
        multiplier = factor
        if renormalize and total != 0:
            multiplier = factor / total
        for j in range(topk):
            weight_offset = t * weight_row + j * weight_col
            id_offset = t * id_row + j * id_col
            if padded:
                store_real(w32, w16, weight_code, weight_offset, np.float32(0.0))
                store_integer(id32, id64, id_code, id_offset, -1)
            else:
                weight = scores[chosen[j]] * multiplier
                store_real(w32, w16, weight_code, weight_offset, weight)
                store_integer(id32, id64, id_code, id_offset, chosen[j])
            if has_token:
                store_integer(
                    tk32,
                    tk64,
                    token_code,
                    t * token_row + j * token_col,
                    j * tokens + t,
                )


# Each kernel is a chunk body driven by `chunk_kernels`. `reassoc` lets the
# row sums use several partial sums (vector lanes).
_topk_gating_body = kernel(_topk_gating_chunk, fastmath={"reassoc", "contract"})


@cache
def topk_gating_kernels():
    """Serial and parallel kernels of top-k gating over `tokens` rows of
    `experts` scores: a float32 softmax over the row (`softmax`) or a
    sigmoid per score. The optional bias (address 0: absent) is added to the
    scores for the selection only; the weights are the selected scores,
    renormalised to sum 1 when `renormalize` (unless they sum to 0) and
    multiplied by `scale`. Padding rows get expert id -1 and weight 0.
    `token_expert_indices[t, j]` is ``j * tokens + t``. Operands, in
    `addresses`, `spans`, `codes` (`codes.py`) and the rows of `strides`:
    weights, ids, token indices, gating, bias, padding."""
    return chunk_kernels(_topk_gating_body)


def _grouped_topk_chunk(chunk, chunks, arguments):
    (
        addresses,
        spans,
        codes,
        tokens,
        experts,
        groups,
        topk_group,
        topk,
        strides,
        renormalize,
        scale,
        use_sigmoid,
    ) = arguments
    # Operands: 0 values (float32), 1 indices, 2 scores, 3 bias.
    values = element_array(addresses[0], spans[0], np.float32)
    i32 = element_array(addresses[1], spans[1], np.int32)
    i64 = element_array(addresses[1], spans[1], np.int64)
    s32 = element_array(addresses[2], spans[2], np.float32)
    s16 = element_array(addresses[2], spans[2], np.uint16)
    b32 = element_array(addresses[3], spans[3], np.float32)
    b16 = element_array(addresses[3], spans[3], np.uint16)
    per_group = experts // groups
    factor = np.float32(scale)
    first = chunk * tokens // chunks
    last = (chunk + 1) * tokens // chunks
    scores = np.empty(experts, np.float32)
    choice = np.empty(experts, np.float32)
    group_scores = np.empty(groups, np.float32)
    group_keys = np.empty(max(topk_group, 1), np.float32)
    group_chosen = np.empty(max(topk_group, 1), np.int64)
    keys = np.empty(max(topk, 1), np.float32)
    chosen = np.zeros(max(topk, 1), np.int64)
    pair_keys = np.empty(2, np.float32)
    pair_chosen = np.empty(2, np.int64)
    for t in range(first, last):
        base = t * strides[2, 0]
        for e in range(experts):
            value = load_real(s32, s16, codes[2], base + e * strides[2, 1])
            if use_sigmoid:
                value = sigmoid(value)
            scores[e] = value
            choice[e] = value + load_real(b32, b16, codes[3], e * strides[3, 0])
        for g in range(groups):
            count = 0
            for e in range(g * per_group, (g + 1) * per_group):
                count = insert_top(pair_keys, pair_chosen, count, 2, choice[e], e)
            group_scores[g] = pair_keys[0] + pair_keys[1]
        count = 0
        for g in range(groups):
            count = insert_top(
                group_keys, group_chosen, count, topk_group, group_scores[g], g
            )
        count = 0
        for j in range(topk_group):
            g = group_chosen[j]
            for e in range(g * per_group, (g + 1) * per_group):
                count = insert_top(keys, chosen, count, topk, choice[e], e)
        total = np.float32(0.0)
        for j in range(topk):
            total += scores[chosen[j]]
        multiplier = factor
        if renormalize and total != 0:
            multiplier = factor / total
        for j in range(topk):
            values[t * strides[0, 0] + j * strides[0, 1]] = (
                scores[chosen[j]] * multiplier
            )
            store_integer(
                i32, i64, codes[1], t * strides[1, 0] + j * strides[1, 1], chosen[j]
            )


_grouped_topk_body = kernel(_grouped_topk_chunk)


@cache
def grouped_topk_kernels():
    """Serial and parallel kernels of DeepSeek-style grouped top-k routing
    (see `infini.ops.base.grouped_topk`). Operands: values, indices, scores,
    bias."""
    return chunk_kernels(_grouped_topk_body)


@helper
def accumulate_row(total, x32, x16, code, base, step, hidden):
    # The dtype branch sits outside the loops, and contiguous rows are walked
    # through slices (indices known to be non-negative), so the loops
    # vectorise (16-bit rows widen eight or sixteen lanes at a time).
    if step == 1:
        if code == 0:
            row32 = x32[base : base + hidden]
            for h in range(hidden):
                total[h] += row32[h]
        else:
            row16 = x16[base : base + hidden]
            if code == 1:
                for h in range(hidden):
                    total[h] += float16_bits_to_float32(row16[h])
            else:
                for h in range(hidden):
                    total[h] += bfloat16_bits_to_float32(row16[h])
    elif code == 0:
        for h in range(hidden):
            total[h] += x32[base + h * step]
    elif code == 1:
        for h in range(hidden):
            total[h] += float16_bits_to_float32(x16[base + h * step])
    else:
        for h in range(hidden):
            total[h] += bfloat16_bits_to_float32(x16[base + h * step])


@helper
def accumulate_four_rows(total, x32, x16, code, b0, b1, b2, b3, hidden):
    """`accumulate_row` of four contiguous rows at once: one load and store
    of `total` per four rows read, which keeps the loop streaming the rows
    rather than bound by its own stores."""
    if code == 0:
        r0, r1 = x32[b0 : b0 + hidden], x32[b1 : b1 + hidden]
        r2, r3 = x32[b2 : b2 + hidden], x32[b3 : b3 + hidden]
        for h in range(hidden):
            total[h] += (r0[h] + r1[h]) + (r2[h] + r3[h])
        return
    q0, q1 = x16[b0 : b0 + hidden], x16[b1 : b1 + hidden]
    q2, q3 = x16[b2 : b2 + hidden], x16[b3 : b3 + hidden]
    if code == 1:
        for h in range(hidden):
            total[h] += (
                float16_bits_to_float32(q0[h]) + float16_bits_to_float32(q1[h])
            ) + (float16_bits_to_float32(q2[h]) + float16_bits_to_float32(q3[h]))
    else:
        for h in range(hidden):
            total[h] += (
                bfloat16_bits_to_float32(q0[h]) + bfloat16_bits_to_float32(q1[h])
            ) + (bfloat16_bits_to_float32(q2[h]) + bfloat16_bits_to_float32(q3[h]))


def _moe_sum_chunk(chunk, chunks, arguments):
    addresses, spans, codes, tokens, topk, hidden, map_size, strides = arguments
    # Operands: 0 output, 1 input, 2 topk_ids, 3 expert_map.
    o32 = element_array(addresses[0], spans[0], np.float32)
    o16 = element_array(addresses[0], spans[0], np.uint16)
    x32 = element_array(addresses[1], spans[1], np.float32)
    x16 = element_array(addresses[1], spans[1], np.uint16)
    id8 = element_array(addresses[2], spans[2], np.uint8)
    id32 = element_array(addresses[2], spans[2], np.int32)
    id64 = element_array(addresses[2], spans[2], np.int64)
    map8 = element_array(addresses[3], spans[3], np.uint8)
    map32 = element_array(addresses[3], spans[3], np.int32)
    map64 = element_array(addresses[3], spans[3], np.int64)
    # Scalars read once: the compiler cannot keep array elements in registers
    # across stores to other arrays (they might alias), and a reload in the
    # inner loops blocks their vectorisation.
    output_code, input_code = codes[0], codes[1]
    id_code, map_code = codes[2], codes[3]
    has_ids = id_code != 0
    has_map = map_code != 0
    output_row, output_step = strides[0, 0], strides[0, 1]
    input_row, input_slot, input_step = strides[1, 0], strides[1, 1], strides[1, 2]
    id_row, id_slot, map_step = strides[2, 0], strides[2, 1], strides[3, 0]
    first = chunk * tokens // chunks
    last = (chunk + 1) * tokens // chunks
    total = np.empty(hidden, np.float32)
    # The input rows of a token's slots that count (expert ids not skipped).
    bases = np.empty(max(topk, 1), np.int64)
    for t in range(first, last):
        count = 0
        for j in range(topk):
            if has_ids:
                offset = t * id_row + j * id_slot
                expert = load_integer(id8, id32, id64, id_code, offset)
                if has_map:
                    if expert < 0 or expert >= map_size:
                        continue
                    expert = load_integer(
                        map8, map32, map64, map_code, expert * map_step
                    )
                if expert < 0:
                    continue
            bases[count] = t * input_row + j * input_slot
            count += 1
        total[:] = 0.0
        j = 0
        if input_step == 1:
            while j + 4 <= count:
                accumulate_four_rows(
                    total,
                    x32,
                    x16,
                    input_code,
                    bases[j],
                    bases[j + 1],
                    bases[j + 2],
                    bases[j + 3],
                    hidden,
                )
                j += 4
        while j < count:
            accumulate_row(total, x32, x16, input_code, bases[j], input_step, hidden)
            j += 1
        store_real_row(
            total, hidden, o32, o16, output_code, t * output_row, output_step
        )


_moe_sum_body = kernel(_moe_sum_chunk, fastmath={"reassoc", "contract"})


@cache
def moe_sum_kernels():
    """Serial and parallel kernels of ``output[t] = sum_j input[t, j]`` over
    the `topk` slots of each token, skipping slots whose (mapped) expert id
    is negative or outside the expert map; float32 accumulation. Operands:
    output, input, topk_ids, expert_map (code 0: absent)."""
    return chunk_kernels(_moe_sum_body)


def _moe_align_run(
    addresses,
    spans,
    codes,
    shape,
    id_strides,
    steps,
    numel,
    num_experts,
    block_size,
    map_size,
    sorted_length,
    block_count,
):
    # Operands: 0 sorted_token_ids, 1 experts_ids, 2 num_tokens_post_pad,
    # 3 topk_ids, 4 expert_map.
    s32 = element_array(addresses[0], spans[0], np.int32)
    s64 = element_array(addresses[0], spans[0], np.int64)
    e32 = element_array(addresses[1], spans[1], np.int32)
    e64 = element_array(addresses[1], spans[1], np.int64)
    c32 = element_array(addresses[2], spans[2], np.int32)
    c64 = element_array(addresses[2], spans[2], np.int64)
    id8 = element_array(addresses[3], spans[3], np.uint8)
    id32 = element_array(addresses[3], spans[3], np.int32)
    id64 = element_array(addresses[3], spans[3], np.int64)
    map8 = element_array(addresses[4], spans[4], np.uint8)
    map32 = element_array(addresses[4], spans[4], np.int32)
    map64 = element_array(addresses[4], spans[4], np.int64)
    has_map = codes[4] != 0
    experts = np.empty(numel, np.int64)
    counts = np.zeros(num_experts + 1, np.int64)
    ndim = shape.shape[0]
    for i in range(numel):
        offset = 0
        rest = i
        for dim in range(ndim - 1, -1, -1):
            offset += (rest % shape[dim]) * id_strides[dim]
            rest //= shape[dim]
        expert = load_integer(id8, id32, id64, codes[3], offset)
        if has_map:
            if 0 <= expert < map_size:
                expert = load_integer(map8, map32, map64, codes[4], expert * steps[4])
            else:
                expert = -1
        if expert < 0 or expert >= num_experts:
            expert = -1
        else:
            counts[expert + 1] += 1
        experts[i] = expert
    # `counts[e]` becomes the padded start of expert `e`.
    for e in range(num_experts):
        padded = (counts[e + 1] + block_size - 1) // block_size * block_size
        counts[e + 1] = counts[e] + padded
    total = counts[num_experts]
    for position in range(sorted_length):
        store_integer(s32, s64, codes[0], position * steps[0], numel)
    for block in range(block_count):
        store_integer(e32, e64, codes[1], block * steps[1], 0)
    for e in range(num_experts):
        for block in range(counts[e] // block_size, counts[e + 1] // block_size):
            store_integer(e32, e64, codes[1], block * steps[1], e)
    cursor = counts[:num_experts].copy()
    for i in range(numel):
        expert = experts[i]
        if expert >= 0:
            store_integer(s32, s64, codes[0], cursor[expert] * steps[0], i)
            cursor[expert] += 1
    store_integer(c32, c64, codes[2], 0, total)


@cache
def moe_align_kernel():
    """The serial counting sort of `moe_align_block_size` (see its base)."""
    return kernel(_moe_align_run)


class OutputStaging:
    """Stages each output that overlaps an input (results as if every input
    were read first): `targets` gives the tensors to write, `finish` copies
    staged results back."""

    def __init__(self, outputs, inputs) -> None:
        present = [meta for meta in inputs if meta is not None]
        self.guards = [
            None
            if meta is None
            else AliasGuard(meta, meta.strides, [(m, m.strides) for m in present])
            for meta in outputs
        ]

    def targets(self, outputs, inputs) -> list:
        addresses = [t.data_ptr() for t in inputs if t is not None]
        result = []
        for guard, tensor in zip(self.guards, outputs, strict=True):
            if tensor is None:
                result.append(None)
            elif guard is not None and guard.needs_staging(
                tensor.data_ptr(), addresses
            ):
                result.append(staging_like(tensor))
            else:
                result.append(tensor)
        return result

    @staticmethod
    def finish(targets, outputs) -> None:
        for target, tensor in zip(targets, outputs, strict=True):
            if target is not None and target is not tensor:
                tensor.copy_(target)


def strides2(meta) -> tuple[int, int]:
    """The (row, column) strides of a 1-D or 2-D tensor (0 when absent)."""
    if meta is None:
        return (0, 0)
    strides = tuple(meta.strides) + (0, 0)
    return strides[0], strides[1]


def spans_of(metas) -> np.ndarray:
    return np.array(
        [0 if m is None else span(m.shape, m.strides) for m in metas], np.int64
    )


def addresses_of(tensors) -> np.ndarray:
    return np.array([0 if t is None else t.data_ptr() for t in tensors], np.int64)


class TopkGatingLaunch:
    """Plans and launches `topk_gating_kernels`; mixed into the
    implementations, whose base validates the arguments first."""

    def plan(self, scoring, gating, bias, padding, weights, ids, token_indices) -> None:
        tokens, experts = gating.shape
        self.tokens, self.experts = tokens, experts
        self.topk = weights.shape[1]
        self.softmax = scoring == "softmax"
        operands = (weights, ids, token_indices, gating, bias, padding)
        self.spans = spans_of(operands)
        self.strides = np.array([strides2(m) for m in operands], np.int64)
        self.codes = np.array(
            [
                real_code(weights),
                integer_code(ids),
                integer_code(token_indices),
                real_code(gating),
                0 if bias is None else real_code(bias),
                integer_code(padding),
            ],
            np.int64,
        )
        self.chunks = gating_chunks(tokens, experts)
        serial, parallel = topk_gating_kernels()
        self.kernel = parallel if self.chunks > 1 else serial
        self.staging = OutputStaging(
            (weights, ids, token_indices), (gating, bias, padding)
        )
        self.empty = tokens == 0 or self.topk == 0

    def run(
        self, gating, bias, padding, weights, ids, token_indices, renormalize, scale
    ) -> None:
        if self.empty:
            return
        inputs = (gating, bias, padding)
        outputs = (weights, ids, token_indices)
        targets = self.staging.targets(outputs, inputs)
        self.kernel(
            self.chunks,
            (
                addresses_of(tuple(targets) + inputs),
                self.spans,
                self.codes,
                self.tokens,
                self.experts,
                self.topk,
                self.strides,
                self.softmax,
                renormalize,
                scale,
            ),
        )
        OutputStaging.finish(targets, outputs)
