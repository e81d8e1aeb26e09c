"""Token sampling for the CUDA-like kernels: the passes that
`random_sample_infinilm` and `top_k_top_p_sampling_from_logits` are built
from, and the counter-based generator they share with the CPU kernels.

A program samples a tile of `ROWS` rows (one row for large vocabularies)
and walks each row in blocks of columns, so every pass below is a loop over
the row with wide, coalesced loads:

- `argmax_pass`: the first index of the largest logit (NaN above every
  number), as the maximum of packed int64 keys ``(order(x) << 32) |
  (2^31 - 1 - index)``, where `order` maps a float32 to an int32 of the same
  order (-0 equal to +0). Greedy decoding is this pass alone.
- `total_pass`: the sum of the unnormalised probabilities ``exp(x - max)``
  (float32 `exp` as the CPU kernels take it, or float64 with a temperature
  for `random_sample_infinilm`), in float64.
- `rank_search`: the token at the first rank (larger logit first, ties to
  the lower index) where the running count or probability mass of the
  ranked tokens reaches a target, without sorting. The 32-bit order key of
  that token is found four bits at a time from the top: one `digit_pass`
  per digit sums, over the tokens whose key starts with the digits found so
  far, the count and mass of those whose next digit is at least `d`, for
  the 16 values of `d` at once, and keeps the largest digit that still
  reaches the target. At most eight passes give the key (the leading digits
  the row's largest key shares with a known lower bound are skipped); the
  tokens with exactly that key share one probability, so how many of them
  are needed follows from the mass still missing, and `tie_pass` finds that
  one in index order with a prefix count. A pass keeps per-lane sums in
  registers and reduces them once: in float64 for `random_sample_infinilm`,
  in float32 lanes (each weight is a float32 `exp`) added in float64 for the
  sampler, so its masses differ from the CPU kernel's rank-order running
  sums by about float32 rounding, which moves a sampled token only when the
  uniform number falls that close to a boundary.
- `index_order_pass`: inverse-transform sampling in index order (the
  unfiltered case of the FlashInfer-style sampler), with block prefix sums.

Random numbers: ``uniform(seed, offset, row)`` (`infini.ops.native.cpu.
sampling.uniform`) hashes the three with SplitMix64 finalisers. The first
two rounds depend on the call only and run on the host (`call_state`); the
kernels run the last round per row (`uniform`), bit for bit the CPU's
uint64 arithmetic, so a seed picks the same uniform numbers on both.

Loop bodies call no `@triton.jit` helper other than `exp_float32`: the
interpreter re-patches `triton.language` on every helper call, which would
dominate its run time.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from infini.ops.native.cuda.special import exp_float32
from infini.ops.runtime.triton import INTERPRETER, next_power_of_two

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIX_FIRST = 0xBF58476D1CE4E5B9
MIX_SECOND = 0x94D049BB133111EB
ROW_GOLDEN = tl.constexpr((3 * GOLDEN) & MASK64)
FIRST = tl.constexpr(MIX_FIRST)
SECOND = tl.constexpr(MIX_SECOND)
INT64_MIN = tl.constexpr(-(2**63))

# Elements of a pass's block (rows x columns) and of a digit pass's block
# (rows x columns, times the 16 digits). The interpreter runs each step as
# one NumPy operation, so it takes large ones.
GPU_BLOCK = 4096
GPU_SAMPLE_BLOCK = 1024
GPU_DIGIT_BLOCK = 128
INTERPRETER_BLOCK = 65536
INTERPRETER_DIGIT_BLOCK = 65536


def mix64(value: int) -> int:
    """SplitMix64's finaliser on Python ints (modulo 2**64)."""
    z = value & MASK64
    z = ((z ^ (z >> 30)) * MIX_FIRST) & MASK64
    z = ((z ^ (z >> 27)) * MIX_SECOND) & MASK64
    return z ^ (z >> 31)


def call_state(seed: int, offset: int) -> int:
    """The generator's state after hashing `seed` and `offset` (uint64
    values), as the CPU kernels' `uniform` computes it before the row."""
    z = mix64(seed + GOLDEN)
    return mix64(z ^ ((offset + 2 * GOLDEN) & MASK64))


def as_int64(value: int) -> int:
    """A uint64 value as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def draw_seed() -> int:
    """A seed drawn from torch's default CPU generator, as the CPU kernels
    draw it (so `torch.manual_seed` makes unseeded sampling reproducible on
    either), modulo 2**64."""
    import torch

    return int(torch.randint(-(2**63), 2**63 - 1, (), dtype=torch.int64)) & MASK64


def float_bits(values) -> np.ndarray:
    """float64 values as the int64 array of their bits."""
    return np.asarray(values, dtype=np.float64).view(np.int64)


class SamplingTiles:
    """Tiles for rows of `vocab` logits: `rows` per program, the column
    `block` of the greedy kernel (its one pass), the column block of the
    sampled kernels' plain passes (`sample_block`: their float64 prefix sums
    take more registers a column) and of their digit passes
    (`digit_block`), and the warps."""

    def __init__(self, vocab: int, rows: int) -> None:
        block_limit = INTERPRETER_BLOCK if INTERPRETER else GPU_BLOCK
        sample_limit = INTERPRETER_BLOCK if INTERPRETER else GPU_SAMPLE_BLOCK
        digit_limit = INTERPRETER_DIGIT_BLOCK if INTERPRETER else GPU_DIGIT_BLOCK
        width = max(16, next_power_of_two(vocab))
        self.digit_block = min(width, digit_limit)
        self.rows = max(
            1, min(digit_limit // self.digit_block, next_power_of_two(max(rows, 1)))
        )
        self.block = max(16, min(width, block_limit // self.rows))
        self.sample_block = max(16, min(width, sample_limit // self.rows))
        self.num_warps = 8 if self.rows * self.block >= 2048 else 4


@triton.jit
def uniform(state, row):
    """The CPU kernels' ``uniform(seed, offset, row)`` for the state of
    `call_state` (uint64) and int64 rows: a float64 in [0, 1)."""
    z = state ^ (row.to(tl.uint64) + ROW_GOLDEN)
    z = (z ^ (z >> 30)) * FIRST
    z = (z ^ (z >> 27)) * SECOND
    z = z ^ (z >> 31)
    return (z >> 11).to(tl.float64) * (1.0 / 9007199254740992.0)


@triton.jit
def order_value(key):
    """The float32 whose `argmax_pass` order is `key` (an int64 holding an
    int32): the inverse of the order map (NaN for the NaN key)."""
    order = key.to(tl.int32)
    bits = tl.where(order >= 0, order, order ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def order_key(value):
    """The 32-bit order key (as int64) of float32 `value`: larger values
    have larger keys, NaN the largest, -0 the key of +0."""
    bits = tl.where(value == 0.0, 0.0, value).to(tl.int32, bitcast=True)
    order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    order = tl.where(value != value, 0x7FFFFFFF, order)
    return order.to(tl.int64) + 2147483648


@triton.jit
def argmax_pass(logits, base, row_mask, vocab, step, ROWS: tl.constexpr,
                BLOCK: tl.constexpr):  # fmt: skip
    """`(index, maximum, lowest)` per row: the first index of the largest
    logit (NaN largest), that logit as float32, and the smallest order key
    (`order_key`) of the row."""
    columns = tl.arange(0, BLOCK)
    best = tl.full([ROWS, BLOCK], INT64_MIN, tl.int64)
    lowest = tl.full([ROWS, BLOCK], 2**32, tl.int64)
    for start in range(0, vocab, BLOCK):
        index = start + columns
        mask = row_mask[:, None] & (index < vocab)[None, :]
        x = tl.load(logits + base[:, None] + index[None, :] * step, mask=mask)
        if x.dtype == tl.bfloat16:
            x = x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
            x = x.to(tl.float32, bitcast=True)
        x = x.to(tl.float32)
        bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
        order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
        order = tl.where(x != x, 0x7FFFFFFF, order)
        key = (order.to(tl.int64) << 32) | (0x7FFFFFFF - index).to(tl.int64)
        best = tl.maximum(best, tl.where(mask, key, INT64_MIN))
        lowest = tl.minimum(lowest, tl.where(mask, order.to(tl.int64), 2**32))
    top = tl.max(best, axis=1)
    index = 0x7FFFFFFF - (top & 0x7FFFFFFF)
    return index, order_value(top >> 32), tl.min(lowest, axis=1) + 2147483648


@triton.jit
def total_pass(logits, base, row_mask, vocab, step, maximum, scale,
               ROWS: tl.constexpr, BLOCK: tl.constexpr,
               DOUBLE: tl.constexpr):  # fmt: skip
    """Per row, the float64 sum of ``exp(x - maximum)`` (float32 `exp`), or
    with `DOUBLE` of ``exp((x - maximum) * scale)`` in float64."""
    columns = tl.arange(0, BLOCK)
    # Per-lane sums, reduced once after the loop.
    total = tl.zeros([ROWS, BLOCK], tl.float64)
    for start in range(0, vocab, BLOCK):
        index = start + columns
        mask = row_mask[:, None] & (index < vocab)[None, :]
        x = tl.load(logits + base[:, None] + index[None, :] * step, mask=mask)
        if x.dtype == tl.bfloat16:
            x = x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
            x = x.to(tl.float32, bitcast=True)
        if DOUBLE:
            w = tl.exp((x.to(tl.float64) - maximum[:, None].to(tl.float64)) * scale)
        else:
            w = exp_float32(x.to(tl.float32) - maximum[:, None]).to(tl.float64)
        total += tl.where(mask, w, 0.0)
    return tl.sum(total, axis=1)


@triton.jit
def above_pass(logits, base, row_mask, vocab, step, maximum, scale, key,
               ROWS: tl.constexpr, BLOCK: tl.constexpr,
               DOUBLE: tl.constexpr):  # fmt: skip
    """Per row, the float64 sum of the weights (as `total_pass` takes them)
    of the tokens whose order key is above `key`."""
    columns = tl.arange(0, BLOCK)
    total = tl.zeros([ROWS, BLOCK], tl.float64)
    for start in range(0, vocab, BLOCK):
        index = start + columns
        mask = row_mask[:, None] & (index < vocab)[None, :]
        x = tl.load(logits + base[:, None] + index[None, :] * step, mask=mask)
        if x.dtype == tl.bfloat16:
            x = x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
            x = x.to(tl.float32, bitcast=True)
        x = x.to(tl.float32)
        bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
        order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
        order = tl.where(x != x, 0x7FFFFFFF, order)
        above = mask & ((order.to(tl.int64) + 2147483648) > key[:, None])
        if DOUBLE:
            w = tl.exp((x.to(tl.float64) - maximum[:, None].to(tl.float64)) * scale)
        else:
            w = exp_float32(x - maximum[:, None]).to(tl.float64)
        total += tl.where(above, w, 0.0)
    return tl.sum(total, axis=1)


@triton.jit
def digit_pass(logits, base, row_mask, vocab, step, maximum, scale, prefix,
               shift, ROWS: tl.constexpr, BLOCK: tl.constexpr,
               WEIGHTED: tl.constexpr, DOUBLE: tl.constexpr):  # fmt: skip
    """Per row and digit `d` (``[ROWS, 16]``): the count and (`WEIGHTED`,
    else zeros) the float64 mass of the tokens whose order key (32 bits) has
    the bits above ``shift + 4`` equal to `prefix` and bits ``shift ...
    shift + 3`` at least `d`. Lanes sum in float64 with `DOUBLE`, else in
    float32 (one token's weight is a float32 `exp` already); the lanes' sums
    add in float64."""
    columns = tl.arange(0, BLOCK)
    digits = tl.arange(0, 16)
    # Per-lane sums, reduced once after the loop.
    counts = tl.zeros([ROWS, BLOCK, 16], tl.int32)
    if DOUBLE:
        masses = tl.zeros([ROWS, BLOCK, 16], tl.float64)
    else:
        masses = tl.zeros([ROWS, BLOCK, 16], tl.float32)
    for start in range(0, vocab, BLOCK):
        index = start + columns
        mask = row_mask[:, None] & (index < vocab)[None, :]
        x = tl.load(logits + base[:, None] + index[None, :] * step, mask=mask)
        if x.dtype == tl.bfloat16:
            x = x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
            x = x.to(tl.float32, bitcast=True)
        x = x.to(tl.float32)
        bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
        order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
        order = tl.where(x != x, 0x7FFFFFFF, order)
        key = order.to(tl.int64) + 2147483648
        inside = mask & ((key >> (shift + 4)) == prefix[:, None])
        digit = ((key >> shift) & 15).to(tl.int32)
        at_least = inside[:, :, None] & (digit[:, :, None] >= digits[None, None, :])
        counts += at_least.to(tl.int32)
        if WEIGHTED:
            if DOUBLE:
                x = x.to(tl.float64)
                w = tl.exp((x - maximum[:, None].to(tl.float64)) * scale)
            else:
                w = exp_float32(x - maximum[:, None])
            masses += tl.where(at_least, w[:, :, None], 0.0)
    return tl.sum(counts, axis=1).to(tl.int64), tl.sum(masses.to(tl.float64), axis=1)


@triton.jit
def tie_pass(logits, base, row_mask, vocab, step, key, position,
             ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Per row, the index of the token at `position` (0-based, index order)
    among those whose order key is `key`; -1 when there is none."""
    columns = tl.arange(0, BLOCK)
    seen = tl.zeros([ROWS], tl.int64)
    found = tl.full([ROWS], -1, tl.int64)
    for start in range(0, vocab, BLOCK):
        index = start + columns
        mask = row_mask[:, None] & (index < vocab)[None, :]
        x = tl.load(logits + base[:, None] + index[None, :] * step, mask=mask)
        if x.dtype == tl.bfloat16:
            x = x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
            x = x.to(tl.float32, bitcast=True)
        x = x.to(tl.float32)
        bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
        order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
        order = tl.where(x != x, 0x7FFFFFFF, order)
        equal = mask & ((order.to(tl.int64) + 2147483648) == key[:, None])
        running = tl.cumsum(equal.to(tl.int64), axis=1) + seen[:, None]
        hit = equal & (running == position[:, None] + 1)
        hit_index = tl.where(hit, index[None, :].to(tl.int64), -1)
        found = tl.maximum(found, tl.max(hit_index, axis=1))
        seen += tl.sum(equal.to(tl.int64), axis=1)
    return found


@triton.jit
def rank_search(logits, base, active, vocab, step, maximum, scale, target, low,
                high, BY_MASS: tl.constexpr, STRICT: tl.constexpr,
                WEIGHTED: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                DIGIT_BLOCK: tl.constexpr, DOUBLE: tl.constexpr):  # fmt: skip
    """Per `active` row, the token at the first rank (larger logit first,
    ties to the lower index) whose running count (`BY_MASS` False: at least
    `target`) or running mass of unnormalised probabilities (at least, or
    with `STRICT` above, `target`) reaches `target`.

    `high` is the row's largest order key and `low` a key the token's is
    known to be at least: the leading digits they share are the token's, and
    the search starts below them (no key is above `high`). A token below
    `low` is not found.

    Returns `(index, rank, mass, key, found)`: the token, its rank, the mass
    of the ranks up to it (a search by count sums it in one more pass when
    `WEIGHTED`, else leaves it meaningless), its order key, and whether it
    was found (when it was not, the other values are meaningless)."""
    digits = tl.arange(0, 16)
    levels = tl.arange(0, 8)
    shared = ((low ^ high)[:, None] >> (28 - 4 * levels)[None, :]) == 0
    shared = tl.where(active, tl.sum(shared.to(tl.int32), axis=1), 8)
    first = tl.minimum(tl.min(shared, axis=0), 7)
    prefix = high >> (32 - 4 * first)
    above_count = tl.zeros([ROWS], tl.int64)
    above_mass = tl.zeros([ROWS], tl.float64)
    equal_count = tl.zeros([ROWS], tl.int64)
    found = active
    for level in range(first, 8):
        shift = 28 - 4 * level
        counts, masses = digit_pass(
            logits, base, active, vocab, step, maximum, scale, prefix, shift,
            ROWS, DIGIT_BLOCK, BY_MASS, DOUBLE,
        )  # fmt: skip
        if BY_MASS:
            reach = above_mass[:, None] + masses
            if STRICT:
                reaches = reach > target[:, None]
            else:
                reaches = reach >= target[:, None]
        else:
            reaches = (above_count[:, None] + counts) >= target[:, None]
        # Counts and masses fall with the digit: the reaching digits are a
        # prefix of 0..15, and the last of them is the key's digit.
        number = tl.sum(reaches.to(tl.int32), axis=1)
        found = found & (number > 0)
        chosen = tl.maximum(number - 1, 0).to(tl.int64)
        # The tokens of the chosen digit and the ones after it, counted
        # together: those after it rank above the key.
        this = digits[None, :] == chosen[:, None]
        after = digits[None, :] == chosen[:, None] + 1
        both = tl.where(this, counts, 0) + (tl.where(after, counts, 0) << 32)
        both = tl.sum(both, axis=1)
        equal_count = (both & 0xFFFFFFFF) - (both >> 32)
        above_count += both >> 32
        above_mass += tl.sum(tl.where(after, masses, 0.0), axis=1)
        prefix = prefix * 16 + chosen
    if not BY_MASS:
        if WEIGHTED:
            # The count passes carry no weights: the mass above the key.
            above_mass = above_pass(
                logits, base, active & found, vocab, step, maximum, scale, prefix,
                ROWS, BLOCK, DOUBLE,
            )  # fmt: skip
    # The tokens of key `prefix` all weigh `weight`: the rank reached is
    # `above_count + position` for the `position` they need.
    value = order_value(prefix - 2147483648)
    if DOUBLE:
        weight = tl.exp((value.to(tl.float64) - maximum.to(tl.float64)) * scale)
    else:
        weight = exp_float32(value - maximum).to(tl.float64)
    last = tl.maximum(equal_count - 1, 0).to(tl.float64)
    if BY_MASS:
        needed = (target - above_mass) / weight
        if STRICT:
            position = tl.floor(needed)
        else:
            position = tl.ceil(needed) - 1.0
    else:
        position = (target - above_count - 1).to(tl.float64)
    position = tl.minimum(tl.maximum(position, 0.0), last)
    position = tl.where(position == position, position, 0.0).to(tl.int64)
    index = tie_pass(
        logits, base, active & found, vocab, step, prefix, position, ROWS, BLOCK
    )
    rank = above_count + position
    mass = above_mass + (position + 1).to(tl.float64) * weight
    return index, rank, mass, prefix, found & (index >= 0)


@triton.jit
def index_order_pass(logits, base, active, vocab, step, maximum, target,
                     ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Per row, the first index (in index order) where the running sum of
    ``exp(x - maximum)`` (float32 `exp`, float64 sums) exceeds `target`;
    -1 when none does."""
    columns = tl.arange(0, BLOCK)
    running = tl.zeros([ROWS], tl.float64)
    chosen = tl.zeros([ROWS], tl.int64) + vocab
    for start in range(0, vocab, BLOCK):
        index = start + columns
        mask = active[:, None] & (index < vocab)[None, :]
        x = tl.load(logits + base[:, None] + index[None, :] * step, mask=mask)
        if x.dtype == tl.bfloat16:
            x = x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
            x = x.to(tl.float32, bitcast=True)
        w = exp_float32(x.to(tl.float32) - maximum[:, None]).to(tl.float64)
        w = tl.where(mask, w, 0.0)
        prefix = tl.cumsum(w, axis=1) + running[:, None]
        hit = mask & (prefix > target[:, None])
        first = tl.min(tl.where(hit, index[None, :].to(tl.int64), vocab), axis=1)
        chosen = tl.minimum(chosen, first)
        running += tl.sum(w, axis=1)
    return tl.where(chosen < vocab, chosen, -1)
