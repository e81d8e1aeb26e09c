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
from numba import prange

from .elementwise import AliasGuard, loader, staging_like, storer
from .jit import helper, kernel
from .memory import STORAGE, element_array

# Tokens x experts below which gating kernels run serially, and the work
# (tokens x experts) of one parallel chunk.
GATING_PARALLEL_THRESHOLD = 16384
GATING_CHUNK = 8192

# The storage used for an absent optional tensor (never read).
_ABSENT = "float32"


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
    returns the new count."""
    if count == k:
        if k == 0 or not ranks_before(value, index, keys[k - 1], indices[k - 1]):
            return count
        position = k - 1
    else:
        position = count
        count += 1
    while position > 0 and ranks_before(
        value, index, keys[position - 1], indices[position - 1]
    ):
        keys[position] = keys[position - 1]
        indices[position] = indices[position - 1]
        position -= 1
    keys[position] = value
    indices[position] = index
    return count


@helper
def sigmoid32(x):
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


@cache
def topk_gating_kernels(
    scoring: str,
    gating_dtype: str,
    bias_dtype: str | None,
    padding_dtype: str | None,
    weight_dtype: str,
    id_dtype: str,
    token_dtype: str | None,
):
    """Serial and parallel kernels of top-k gating over `tokens` rows of
    `experts` scores: `scoring` is "softmax" (float32 softmax over the row)
    or "sigmoid". The optional bias is added to the scores for the selection
    only; the weights are the selected scores, renormalised to sum 1 when
    `renormalize` (unless they sum to 0) and multiplied by `scale`. Padding
    rows get expert id -1 and weight 0. `token_expert_indices[t, j]` is
    ``j * tokens + t``."""
    softmax = scoring == "softmax"
    has_bias = bias_dtype is not None
    has_padding = padding_dtype is not None
    has_token = token_dtype is not None
    load_gating = loader(gating_dtype)
    load_bias = loader(bias_dtype or _ABSENT)
    load_padding = loader(padding_dtype or _ABSENT)
    store_weight = storer(weight_dtype)
    store_index = storer(id_dtype)
    store_token = storer(token_dtype or "int32")
    gating_storage = STORAGE[gating_dtype]
    bias_storage = STORAGE[bias_dtype or _ABSENT]
    padding_storage = STORAGE[padding_dtype or _ABSENT]
    weight_storage = STORAGE[weight_dtype]
    id_storage = STORAGE[id_dtype]
    token_storage = STORAGE[token_dtype or "int32"]

    def run(
        weight_address,
        id_address,
        token_address,
        gating_address,
        bias_address,
        padding_address,
        spans,
        tokens,
        experts,
        topk,
        strides,
        renormalize,
        scale,
        chunks,
    ):
        weights = element_array(weight_address, spans[0], weight_storage)
        ids = element_array(id_address, spans[1], id_storage)
        token_indices = element_array(token_address, spans[2], token_storage)
        gating = element_array(gating_address, spans[3], gating_storage)
        bias = element_array(bias_address, spans[4], bias_storage)
        padding = element_array(padding_address, spans[5], padding_storage)
        factor = np.float32(scale)
        for chunk in prange(chunks):
            first = chunk * tokens // chunks
            last = (chunk + 1) * tokens // chunks
            scores = np.empty(experts, np.float32)
            keys = np.empty(max(topk, 1), np.float32)
            chosen = np.empty(max(topk, 1), np.int64)
            for t in range(first, last):
                base = t * strides[0, 0]
                if softmax:
                    maximum = np.float32(-np.inf)
                    for e in range(experts):
                        value = np.float32(
                            load_gating(gating, base + e * strides[0, 1])
                        )
                        scores[e] = value
                        if value > maximum:
                            maximum = value
                    total = np.float32(0.0)
                    for e in range(experts):
                        value = np.exp(scores[e] - maximum)
                        scores[e] = value
                        total += value
                    inverse = np.float32(1.0) / total
                    for e in range(experts):
                        scores[e] *= inverse
                else:
                    for e in range(experts):
                        value = np.float32(
                            load_gating(gating, base + e * strides[0, 1])
                        )
                        scores[e] = sigmoid32(value)
                count = 0
                for e in range(experts):
                    key = scores[e]
                    if has_bias:
                        key += np.float32(load_bias(bias, e * strides[1, 0]))
                    count = insert_top(keys, chosen, count, topk, key, e)
                padded = False
                if has_padding:
                    padded = load_padding(padding, t * strides[2, 0]) != 0
                total = np.float32(0.0)
                for j in range(topk):
                    total += scores[chosen[j]]
                multiplier = factor
                if renormalize and total != 0:
                    multiplier = factor / total
                for j in range(topk):
                    weight_offset = t * strides[3, 0] + j * strides[3, 1]
                    id_offset = t * strides[4, 0] + j * strides[4, 1]
                    if padded:
                        store_weight(weights, weight_offset, np.float32(0.0))
                        store_index(ids, id_offset, -1)
                    else:
                        store_weight(
                            weights, weight_offset, scores[chosen[j]] * multiplier
                        )
                        store_index(ids, id_offset, chosen[j])
                    if has_token:
                        store_token(
                            token_indices,
                            t * strides[5, 0] + j * strides[5, 1],
                            j * tokens + t,
                        )

    return kernel(run), kernel(run, parallel=True)


@cache
def grouped_topk_kernels(
    score_dtype: str, bias_dtype: str, value_dtype: str, index_dtype: str
):
    """Serial and parallel kernels of DeepSeek-style grouped top-k routing
    (see `infini.ops.base.grouped_topk`)."""
    load_score = loader(score_dtype)
    load_bias = loader(bias_dtype)
    store_value = storer(value_dtype)
    store_index = storer(index_dtype)
    score_storage = STORAGE[score_dtype]
    bias_storage = STORAGE[bias_dtype]
    value_storage = STORAGE[value_dtype]
    index_storage = STORAGE[index_dtype]

    def run(
        value_address,
        index_address,
        score_address,
        bias_address,
        spans,
        tokens,
        experts,
        groups,
        topk_group,
        topk,
        strides,
        renormalize,
        scale,
        sigmoid,
        chunks,
    ):
        values = element_array(value_address, spans[0], value_storage)
        indices = element_array(index_address, spans[1], index_storage)
        scores_in = element_array(score_address, spans[2], score_storage)
        bias = element_array(bias_address, spans[3], bias_storage)
        per_group = experts // groups
        factor = np.float32(scale)
        neg_inf = np.float32(-np.inf)
        for chunk in prange(chunks):
            first = chunk * tokens // chunks
            last = (chunk + 1) * tokens // chunks
            scores = np.empty(experts, np.float32)
            choice = np.empty(experts, np.float32)
            group_scores = np.empty(groups, np.float32)
            group_keys = np.empty(max(topk_group, 1), np.float32)
            group_chosen = np.empty(max(topk_group, 1), np.int64)
            keys = np.empty(max(topk, 1), np.float32)
            chosen = np.empty(max(topk, 1), np.int64)
            pair_keys = np.empty(2, np.float32)
            pair_chosen = np.empty(2, np.int64)
            for t in range(first, last):
                base = t * strides[2, 0]
                for e in range(experts):
                    value = np.float32(load_score(scores_in, base + e * strides[2, 1]))
                    if sigmoid:
                        value = sigmoid32(value)
                    scores[e] = value
                    choice[e] = value + np.float32(load_bias(bias, e * strides[3, 0]))
                for g in range(groups):
                    count = 0
                    for e in range(g * per_group, (g + 1) * per_group):
                        count = insert_top(
                            pair_keys, pair_chosen, count, 2, choice[e], e
                        )
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
                # Fewer candidates than `topk` cannot happen (validated), but
                # keep every write defined anyway.
                for j in range(count, topk):
                    keys[j] = neg_inf
                    chosen[j] = 0
                total = np.float32(0.0)
                for j in range(topk):
                    total += scores[chosen[j]]
                multiplier = factor
                if renormalize and total != 0:
                    multiplier = factor / total
                for j in range(topk):
                    store_value(
                        values,
                        t * strides[0, 0] + j * strides[0, 1],
                        scores[chosen[j]] * multiplier,
                    )
                    store_index(
                        indices, t * strides[1, 0] + j * strides[1, 1], chosen[j]
                    )

    return kernel(run), kernel(run, parallel=True)


@cache
def moe_sum_kernels(dtype: str, id_dtype: str | None, map_dtype: str | None):
    """Serial and parallel kernels of ``output[t] = sum_j input[t, j]`` over
    the `topk` slots of each token, skipping slots whose (mapped) expert id
    is negative or outside the expert map; float32 accumulation."""
    has_ids = id_dtype is not None
    has_map = map_dtype is not None
    load = loader(dtype)
    store = storer(dtype)
    load_id = loader(id_dtype or "int64")
    load_map = loader(map_dtype or "int64")
    storage = STORAGE[dtype]
    id_storage = STORAGE[id_dtype or "int64"]
    map_storage = STORAGE[map_dtype or "int64"]

    def run(
        out_address,
        in_address,
        id_address,
        map_address,
        spans,
        tokens,
        topk,
        hidden,
        map_size,
        strides,
        chunks,
    ):
        out = element_array(out_address, spans[0], storage)
        x = element_array(in_address, spans[1], storage)
        ids = element_array(id_address, spans[2], id_storage)
        expert_map = element_array(map_address, spans[3], map_storage)
        for chunk in prange(chunks):
            first = chunk * tokens // chunks
            last = (chunk + 1) * tokens // chunks
            total = np.empty(hidden, np.float32)
            for t in range(first, last):
                for h in range(hidden):
                    total[h] = 0.0
                for j in range(topk):
                    if has_ids:
                        expert = np.int64(
                            load_id(ids, t * strides[2, 0] + j * strides[2, 1])
                        )
                        if has_map:
                            if expert < 0 or expert >= map_size:
                                continue
                            expert = np.int64(
                                load_map(expert_map, expert * strides[3, 0])
                            )
                        if expert < 0:
                            continue
                    base = t * strides[1, 0] + j * strides[1, 1]
                    for h in range(hidden):
                        total[h] += np.float32(load(x, base + h * strides[1, 2]))
                out_base = t * strides[0, 0]
                for h in range(hidden):
                    store(out, out_base + h * strides[0, 1], total[h])

    return kernel(run, fastmath={"reassoc", "contract"}), kernel(
        run, parallel=True, fastmath={"reassoc", "contract"}
    )


@cache
def moe_align_kernel(
    id_dtype: str,
    map_dtype: str | None,
    sorted_dtype: str,
    expert_dtype: str,
    count_dtype: str,
):
    """The serial counting sort of `moe_align_block_size` (see its base)."""
    has_map = map_dtype is not None
    load_id = loader(id_dtype)
    load_map = loader(map_dtype or "int64")
    store_sorted = storer(sorted_dtype)
    store_expert = storer(expert_dtype)
    store_count = storer(count_dtype)
    id_storage = STORAGE[id_dtype]
    map_storage = STORAGE[map_dtype or "int64"]
    sorted_storage = STORAGE[sorted_dtype]
    expert_storage = STORAGE[expert_dtype]
    count_storage = STORAGE[count_dtype]

    def run(
        sorted_address,
        expert_address,
        count_address,
        id_address,
        map_address,
        spans,
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
        sorted_ids = element_array(sorted_address, spans[0], sorted_storage)
        expert_ids = element_array(expert_address, spans[1], expert_storage)
        post_pad = element_array(count_address, spans[2], count_storage)
        ids = element_array(id_address, spans[3], id_storage)
        expert_map = element_array(map_address, spans[4], map_storage)
        experts = np.empty(numel, np.int64)
        counts = np.zeros(num_experts + 1, np.int64)
        ndim = shape.shape[0]
        for i in range(numel):
            offset = 0
            rest = i
            for dim in range(ndim - 1, -1, -1):
                offset += (rest % shape[dim]) * id_strides[dim]
                rest //= shape[dim]
            expert = np.int64(load_id(ids, offset))
            if has_map:
                if 0 <= expert < map_size:
                    expert = np.int64(load_map(expert_map, expert * steps[4]))
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
            store_sorted(sorted_ids, position * steps[0], numel)
        for block in range(block_count):
            store_expert(expert_ids, block * steps[1], 0)
        for e in range(num_experts):
            for block in range(counts[e] // block_size, counts[e + 1] // block_size):
                store_expert(expert_ids, block * steps[1], e)
        cursor = counts[:num_experts].copy()
        for i in range(numel):
            expert = experts[i]
            if expert >= 0:
                store_sorted(sorted_ids, cursor[expert] * steps[0], i)
                cursor[expert] += 1
        store_count(post_pad, 0, total)

    return kernel(run)


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


def _strides2(meta) -> tuple[int, int]:
    """The (row, column) strides of a 1-D or 2-D tensor (0 when absent)."""
    if meta is None:
        return (0, 0)
    strides = tuple(meta.strides) + (0, 0)
    return strides[0], strides[1]


def _span(meta) -> int:
    from .memory import span

    return 0 if meta is None else span(meta.shape, meta.strides)


class TopkGatingLaunch:
    """Plans and launches `topk_gating_kernels`; mixed into the
    implementations, whose base validates the arguments first."""

    def plan(self, scoring, gating, bias, padding, weights, ids, token_indices) -> None:
        tokens, experts = gating.shape
        self.tokens, self.experts = tokens, experts
        self.topk = weights.shape[1]
        operands = (weights, ids, token_indices, gating, bias, padding)
        self.spans = np.array([_span(m) for m in operands], dtype=np.int64)
        self.strides = np.array(
            [
                _strides2(m)
                for m in (gating, bias, padding, weights, ids, token_indices)
            ],
            dtype=np.int64,
        )
        self.chunks = gating_chunks(tokens, experts)
        serial, parallel = topk_gating_kernels(
            scoring,
            gating.dtype,
            None if bias is None else bias.dtype,
            None if padding is None else padding.dtype,
            weights.dtype,
            ids.dtype,
            None if token_indices is None else token_indices.dtype,
        )
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
            targets[0].data_ptr(),
            targets[1].data_ptr(),
            0 if targets[2] is None else targets[2].data_ptr(),
            gating.data_ptr(),
            0 if bias is None else bias.data_ptr(),
            0 if padding is None else padding.data_ptr(),
            self.spans,
            self.tokens,
            self.experts,
            self.topk,
            self.strides,
            renormalize,
            scale,
            self.chunks,
        )
        OutputStaging.finish(targets, outputs)
