"""Token sampling kernels: `random_sample_infinilm` and the top-k / top-p
samplers (`top_k_top_p_sampler`, `top_k_top_p_sample_infinilm`,
`top_k_top_p_sampling_from_logits`).

A row is sampled by inverse transform with one uniform number: the kept
tokens are walked in rank order (larger logit first, ties to the lower
index), their unnormalised probabilities ``exp(logit - max)`` are summed,
and the first token whose running sum exceeds ``u * total`` is taken. The
rank order comes from a binary heap over the row that is popped lazily, so
a small top-k or a peaked top-p costs about one pass over the row instead
of a full sort; without filters no order is needed at all. A row with
``top_k == 1`` (greedy decoding) is only the first of that order, found in
place by integer maxima over the logits' bit patterns (`greedy_bits`),
without copying the row.

Uniform numbers are counter based: ``uniform(seed, offset, row)`` hashes
the three with SplitMix64 finalisers, so equal seeds give equal samples on
any number of threads, and rows are independent.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from .codes import INTEGER_CODE, REAL_CODE, store_integer
from .jit import helper, kernel
from .memory import element_array
from .numeric import bfloat16_bits_to_float32, float16_bits_to_float32
from .routing import ranks_before

MASK64 = (1 << 64) - 1


def routine(function):
    """A compiled (not inlined) function, cached on disk: the row samplers
    are large, and compiling them once instead of inside every kernel
    specialisation keeps the cold start short. Callers pass exactly the
    types documented on each routine, so one specialisation serves all.
    Cached like the kernels (`kernel`), so a damaged entry is a miss."""
    return kernel(function)


def draw_seed() -> int:
    """A seed drawn from torch's default CPU generator (so `torch.manual_seed`
    makes unseeded sampling reproducible), modulo 2**64."""
    import torch

    return int(torch.randint(-(2**63), 2**63 - 1, (), dtype=torch.int64)) & MASK64


@helper
def mix64(value):
    z = value
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@helper
def uniform(seed, offset, row):
    """A float64 in [0, 1) determined by `(seed, offset, row)` (uint64s)."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    z = mix64(seed + golden)
    z = mix64(z ^ (offset + golden * np.uint64(2)))
    z = mix64(z ^ (row + golden * np.uint64(3)))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@routine
def sift_down(heap, keys, position, size):
    item = heap[position]
    while True:
        child = 2 * position + 1
        if child >= size:
            break
        right = child + 1
        if right < size and ranks_before(
            keys[heap[right]], heap[right], keys[heap[child]], heap[child]
        ):
            child = right
        if not ranks_before(keys[heap[child]], heap[child], keys[item], item):
            break
        heap[position] = heap[child]
        position = child
    heap[position] = item


@routine
def heapify(heap, keys, size):
    """Makes `heap[:size]` a max-heap (in rank order) of indices 0..size-1."""
    for i in range(size):
        heap[i] = i
    for position in range(size // 2 - 1, -1, -1):
        sift_down(heap, keys, position, size)


@helper
def heap_pop(heap, keys, size):
    """Removes the top of `heap[:size]`; returns it (the heap shrinks by 1)."""
    top = heap[0]
    heap[0] = heap[size - 1]
    if size > 1:
        sift_down(heap, keys, 0, size - 1)
    return top


@helper
def argmax_row(keys, n):
    """The first index of the largest key (NaN counts as largest)."""
    best = 0
    for i in range(1, n):
        if ranks_before(keys[i], i, keys[best], best):
            best = i
    return best


# Logits per block of the greedy pass (`greedy_bits`).
GREEDY_BLOCK = 1024
# Greedy rows (every `k` is 1) run on the calling thread up to this many
# logits in all (a decode step's few rows): the pass is one read of the row.
GREEDY_SERIAL_LOGITS = 1 << 20


@helper
def ordered_key(bits, up):
    """The float whose bit pattern is `bits` (float32, or a 16-bit float's
    bits shifted `up` by 16) as an int32 of the same order: larger floats
    give larger keys, -0.0 one less than +0.0, NaNs beyond the infinities
    on their sign's side."""
    value = np.int32(np.uint32(bits) << np.uint32(up))
    return np.int32(value ^ ((value >> 31) & 0x7FFFFFFF))


@helper
def greedy_bits(bits, base, step, n, up, infinity):
    """`argmax_row`'s choice (the first index of the largest logit, NaN
    counting as largest) over `n` logits read as bit patterns from `bits`
    (every `step` elements from `base`; `up` as in `ordered_key`,
    `infinity` the shifted bits of +inf), without copying them. The largest
    key of each `GREEDY_BLOCK` block and the largest magnitude (beyond
    `infinity`: a NaN) are int32 maxima, which vectorise; then the first
    position holding the largest value is searched from its block (from
    the start when it is zero: -0.0 and +0.0 tie)."""
    lowest = np.int32(-(1 << 31))
    best = lowest
    best_block = 0
    widest = np.int32(0)
    for start in range(0, n, GREEDY_BLOCK):
        stop = min(start + GREEDY_BLOCK, n)
        block_best = lowest
        block_widest = np.int32(0)
        for i in range(start, stop):
            bits_i = bits[np.uint64(base + i * step)]
            block_best = max(block_best, ordered_key(bits_i, up))
            magnitude = np.int32((np.uint32(bits_i) << np.uint32(up)) & 0x7FFFFFFF)
            block_widest = max(block_widest, magnitude)
        if block_best > best:
            best = block_best
            best_block = start
        widest = max(widest, block_widest)
    if widest > infinity:
        for i in range(n):
            bits_i = np.uint32(bits[np.uint64(base + i * step)]) << np.uint32(up)
            if bits_i & 0x7FFFFFFF > infinity:
                return i
    for i in range(0 if best == 0 else best_block, n):
        key = ordered_key(bits[np.uint64(base + i * step)], up)
        if key == best or (best == 0 and key == -1):
            return i
    return 0


@helper
def greedy_row(u32, u16, code, base, step, n):
    """The greedy choice (`top_k == 1`) of a logits row of dtype `code`
    (`REAL_CODE`), read in place; contiguous rows compile with a constant
    step, so the passes vectorise."""
    if code == 0:
        if step == 1:
            return greedy_bits(u32, base, 1, n, 0, 0x7F800000)
        return greedy_bits(u32, base, step, n, 0, 0x7F800000)
    infinity = 0x7C000000 if code == 1 else 0x7F800000
    if step == 1:
        return greedy_bits(u16, base, 1, n, 16, infinity)
    return greedy_bits(u16, base, step, n, 16, infinity)


@routine
def sample_row(keys, n, k, p, u, joint, heap, order, weights):
    """Samples an index of `keys[:n]` (logits) after top-k (`k` in
    ``(0, n)``, else none) and top-p (`p` < 1, else none) filtering.

    Top-k keeps the `k` first tokens in rank order. Top-p then keeps the
    first tokens in rank order while the probability mass before them is
    below `p` (at least one token); that mass is relative to the top-k
    tokens, or to the whole row when `joint`. The kept tokens are sampled in
    proportion to their probabilities with the uniform number `u`.

    Types: `keys`, `weights` float32[:]; `heap`, `order` int32[:]; `n`, `k`
    int64; `p`, `u` float64; `joint` bool."""
    kept_limit = k if 0 < k < n else n
    if kept_limit == n and not p < 1.0:
        best = argmax_row(keys, n)
        maximum = keys[best]
        total = 0.0
        for i in range(n):
            weight = np.exp(keys[i] - maximum)
            weights[i] = weight
            total += weight
        target = u * total
        running = 0.0
        for i in range(n):
            running += weights[i]
            if running > target:
                return i
        return best
    heapify(heap, keys, n)
    size = n
    maximum = keys[heap[0]]
    normaliser = 0.0
    if joint or kept_limit == n:
        for i in range(n):
            normaliser += np.exp(keys[i] - maximum)
    popped = 0
    if not joint:
        for j in range(kept_limit if kept_limit < n else 0):
            index = heap_pop(heap, keys, size)
            size -= 1
            order[j] = index
            weight = np.exp(keys[index] - maximum)
            weights[j] = weight
            normaliser += weight
        popped = kept_limit if kept_limit < n else 0
    limit = p * normaliser
    kept = 0
    mass = 0.0
    while kept < kept_limit:
        if kept > 0 and not mass < limit:
            break
        if kept == popped:
            index = heap_pop(heap, keys, size)
            size -= 1
            order[kept] = index
            weights[kept] = np.exp(keys[index] - maximum)
            popped += 1
        mass += weights[kept]
        kept += 1
    target = u * mass
    running = 0.0
    for j in range(kept):
        running += weights[j]
        if running > target:
            return order[j]
    return order[kept - 1]


@routine
def random_sample_row(keys, n, random_val, topp, topk, temperature, heap, order):
    """InfiniLM's `random_sample` of `keys[:n]`: argmax unless
    ``random_val > 0``, ``topp > 0``, ``topk > 1`` and ``temperature > 0``;
    otherwise, in rank order, ``cum`` is the running sum of
    ``softmax(keys / temperature)`` and the result is the first token with
    ``cum >= min(cum[min(topk, n) - 1], topp) * random_val``.

    Types: `keys` float32[:]; `heap`, `order` int32[:]; `n`, `topk` int64;
    the others float64."""
    if not (random_val > 0.0 and topp > 0.0 and topk > 1 and temperature > 0.0):
        return argmax_row(keys, n)
    kept_limit = min(topk, n)
    heapify(heap, keys, n)
    size = n
    maximum = np.float64(keys[heap[0]])
    scale = 1.0 / temperature
    normaliser = 0.0
    for i in range(n):
        normaliser += np.exp((np.float64(keys[i]) - maximum) * scale)
    cumulative = np.empty(kept_limit, np.float64)
    count = 0
    running = 0.0
    while count < kept_limit:
        index = heap_pop(heap, keys, size)
        size -= 1
        order[count] = index
        running += np.exp((np.float64(keys[index]) - maximum) * scale) / normaliser
        cumulative[count] = running
        count += 1
        if running >= topp:
            break
    threshold = min(running, topp) * random_val
    for j in range(count):
        if cumulative[j] >= threshold:
            return order[j]
    return order[count - 1]


# Runtime dtype codes: the sampling kernels read every tensor through typed
# views chosen by codes, so one compiled kernel serves every dtype
# combination (compiling one per combination would take minutes).
# `REAL_CODE` for the logits, `INTEGER_CODE` for `k`, `indices` and `out`
# (see `codes.py`), and these for `p`:
FLOAT_CODE = {None: 0, "float32": 1, "float64": 2}


@helper
def load_logits(keys, n, f32, u16, code, base, step):
    """Reads `n` logits starting at `base` (every `step` elements) into the
    float32 `keys`; `code` is `REAL_CODE` of their dtype."""
    if code == 0:
        for i in range(n):
            keys[i] = f32[base + i * step]
    elif code == 1:
        for i in range(n):
            keys[i] = float16_bits_to_float32(u16[base + i * step])
    else:
        for i in range(n):
            keys[i] = bfloat16_bits_to_float32(u16[base + i * step])


@helper
def load_int(i32, i64, code, index):
    if code == 1:
        return np.int64(i32[index])
    return i64[index]


@helper
def load_float(f32, f64, code, index):
    if code == 1:
        return np.float64(f32[index])
    return f64[index]


def _random_sample_run(
    out_address,
    logits_address,
    logits_span,
    n,
    step,
    codes,
    random_val,
    topp,
    topk,
    temperature,
):
    out32 = element_array(out_address, 1, np.int32)
    out64 = element_array(out_address, 1, np.int64)
    f32 = element_array(logits_address, logits_span, np.float32)
    u16 = element_array(logits_address, logits_span, np.uint16)
    keys = np.empty(n, np.float32)
    load_logits(keys, n, f32, u16, codes[0], 0, step)
    heap = np.empty(n, np.int32)
    order = np.empty(n, np.int32)
    choice = random_sample_row(
        keys,
        np.int64(n),
        np.float64(random_val),
        np.float64(topp),
        np.int64(topk),
        np.float64(temperature),
        heap,
        order,
    )
    store_integer(out32, out64, codes[1], 0, choice)


@cache
def random_sample_kernel():
    """The serial kernel of `random_sample_infinilm` over one row; `codes`
    holds the `REAL_CODE` of the logits and the `INTEGER_CODE` of `out`."""
    return kernel(_random_sample_run)


@routine
def sample_rows(first, last, views, spans, vocab, steps, codes, seed, offset, joint):
    """Samples output rows `first` to `last` (`top_k_top_p_kernels`);
    `views` holds the operands' typed views. A row whose `k` is 1 takes
    the greedy choice in place (`greedy_row`: what `sample_row` returns
    then, whatever `p` and `u`); the others copy their logits into float32
    buffers, allocated for the first of them."""
    out32, out64, f32, u16, u32, k32, k64, p32, p64, i32, i64 = views
    keys = np.empty(0, np.float32)
    heap = np.empty(0, np.int32)
    order = np.empty(0, np.int32)
    weights = np.empty(0, np.float32)
    for r in range(first, last):
        source = np.int64(r)
        if codes[3] != 0:
            source = load_int(i32, i64, codes[3], r * steps[4])
        k = np.int64(0)
        if codes[1] != 0:
            k = load_int(k32, k64, codes[1], r * steps[2])
        if k == 1:
            choice = greedy_row(u32, u16, codes[0], source * steps[0], steps[1], vocab)
            store_integer(out32, out64, codes[4], r * steps[5], choice)
            continue
        if keys.shape[0] == 0:
            keys = np.empty(vocab, np.float32)
            heap = np.empty(vocab, np.int32)
            order = np.empty(vocab, np.int32)
            weights = np.empty(vocab, np.float32)
        load_logits(keys, vocab, f32, u16, codes[0], source * steps[0], steps[1])
        p = np.float64(1.0)
        if codes[2] != 0:
            p = load_float(p32, p64, codes[2], r * steps[3])
        u = uniform(seed, offset, np.uint64(r))
        choice = sample_row(keys, np.int64(vocab), k, p, u, joint, heap, order, weights)
        store_integer(out32, out64, codes[4], r * steps[5], choice)


@helper
def all_greedy(k32, k64, codes, rows, step):
    """Whether every output row's `k` is 1."""
    if codes[1] == 0:
        return False
    for r in range(rows):
        if load_int(k32, k64, codes[1], r * step) != 1:
            return False
    return True


def _top_k_top_p_run(
    out_address,
    logits_address,
    k_address,
    p_address,
    index_address,
    spans,
    rows,
    vocab,
    steps,
    codes,
    seed,
    offset,
    joint,
    chunks,
):
    out32 = element_array(out_address, spans[0], np.int32)
    out64 = element_array(out_address, spans[0], np.int64)
    f32 = element_array(logits_address, spans[1], np.float32)
    u16 = element_array(logits_address, spans[1], np.uint16)
    u32 = element_array(logits_address, spans[1], np.uint32)
    k32 = element_array(k_address, spans[2], np.int32)
    k64 = element_array(k_address, spans[2], np.int64)
    p32 = element_array(p_address, spans[3], np.float32)
    p64 = element_array(p_address, spans[3], np.float64)
    i32 = element_array(index_address, spans[4], np.int32)
    i64 = element_array(index_address, spans[4], np.int64)
    views = (out32, out64, f32, u16, u32, k32, k64, p32, p64, i32, i64)
    if chunks > 1 and not (
        rows * vocab <= GREEDY_SERIAL_LOGITS
        and all_greedy(k32, k64, codes, rows, steps[2])
    ):
        for chunk in prange(chunks):
            first = chunk * rows // chunks
            last = (chunk + 1) * rows // chunks
            sample_rows(
                first, last, views, spans, vocab, steps, codes, seed, offset, joint
            )
    else:
        # One chunk, or greedy rows few enough for the calling thread.
        sample_rows(0, rows, views, spans, vocab, steps, codes, seed, offset, joint)


@cache
def top_k_top_p_kernels():
    """Serial and parallel kernels sampling one token per output row with
    `sample_rows`; output row `r` reads logits row ``indices[r]`` (or `r`),
    ``k[r]`` and ``p[r]`` (steps may be 0 to broadcast one value) and the
    uniform number ``uniform(seed, offset, r)``. `codes` holds the
    `REAL_CODE` of the logits and the `INTEGER_CODE` / `FLOAT_CODE` of `k`,
    `p`, `indices` and `out` (0: absent). The parallel kernel runs its
    chunks on the pool, except greedy rows of at most `GREEDY_SERIAL_LOGITS`
    logits in all, which it runs on the calling thread."""
    return kernel(_top_k_top_p_run), kernel(_top_k_top_p_run, parallel=True)


class TopKTopPLaunch:
    """Plans and launches `top_k_top_p_kernels`; mixed into the
    implementations, whose base validates the arguments first."""

    def plan(self, logits, k, p, indices, out) -> None:
        from infini.ops.core.geometry import span

        from .routing import gating_chunks

        self.rows, self.vocab = out.shape[0], logits.shape[1]
        self.logit_rows = logits.shape[0]
        operands = (out, logits, k, p, indices)
        self.spans = np.array(
            [0 if m is None else span(m.shape, m.strides) for m in operands], np.int64
        )

        def step(meta):
            # A `(1,)` parameter serves every row.
            if meta is None or meta.shape[0] == 1:
                return 0
            return meta.strides[0]

        self.steps = np.array(
            [
                logits.strides[0],
                logits.strides[1],
                step(k),
                step(p),
                step(indices),
                out.strides[0],
            ],
            np.int64,
        )
        self.codes = np.array(
            [
                REAL_CODE[logits.dtype],
                INTEGER_CODE[None if k is None else k.dtype],
                FLOAT_CODE[None if p is None else p.dtype],
                INTEGER_CODE[None if indices is None else indices.dtype],
                INTEGER_CODE[out.dtype],
            ],
            np.int64,
        )
        self.chunks = gating_chunks(self.rows, self.vocab)
        serial, parallel = top_k_top_p_kernels()
        self.kernel = parallel if self.chunks > 1 else serial
        self.empty = self.rows == 0

    def sample(self, logits, k, p, indices, out, seed, offset, joint) -> None:
        if self.empty:
            return
        # `out` never overlaps the inputs in a way that matters: each row's
        # logits are copied to a buffer before its token is written, and
        # `k`/`p`/`indices` of a row are read before its token too.
        self.kernel(
            out.data_ptr(),
            logits.data_ptr(),
            0 if k is None else k.data_ptr(),
            0 if p is None else p.data_ptr(),
            0 if indices is None else indices.data_ptr(),
            self.spans,
            self.rows,
            self.vocab,
            self.steps,
            self.codes,
            # Seeds and offsets arrive as Python ints modulo 2**64; the
            # kernel's generator hashes them as unsigned 64-bit integers.
            np.uint64(seed),
            np.uint64(offset),
            joint,
            self.chunks,
        )
