"""KV-cache write kernels (`reshape_and_cache`, `reshape_and_cache_flash`,
`paged_caching_infinilm`, `kv_caching_infinilm`), and float32 -> fp8
conversions.

Every one of these operators copies, per token, a small ``(heads, head)``
matrix of `key` and one of `value` into a cache position computed from an
index tensor:

- slot mode: ``slot = slot_mapping[token]``, skipped when negative,
  ``(block, offset) = divmod(slot, block_size)``, and the destination starts
  at ``block * stride_a + offset * stride_b``;
- append mode (`kv_caching_infinilm`): tokens are ``(batch, seq)`` and the
  destination starts at ``b * stride_a + (past[b] + s) * stride_b``.

Each per-token matrix is walked as up to three coalesced dimensions with
arbitrary source and destination strides, which covers the vLLM layouts
(including the ``[blocks, heads, head/x, block, x]`` key cache, where the
head dimension splits in two) and permuted views. Tokens run in parallel.
Indices are checked in a first pass, so a bad one leaves the caches as they
were. A source sharing memory with a cache (a view of the cache itself) is
copied aside first, so every token gets the values the sources held before
the call (docs/behaviour.md, "Aliasing").

``kv_cache_dtype`` "auto" copies bit patterns; the fp8 modes divide by the
scale in float32 and round to nearest even into fp8 bytes, saturating to the
largest finite value as vLLM's CUDA kernels do (`__NV_SATFINITE`).
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np
from numba import prange

from infini.ops.core.geometry import coalesce, span

from .binding import checked, do_nothing
from .dtype_io import BITS_DTYPE, loader
from .jit import helper, kernel
from .memory import STORAGE, KnownAddresses, element_array
from .numeric import float32_bits

CHUNK_ELEMENTS = 32768
PARALLEL_THRESHOLD = 131072

# The common part of the `plan` array, then one block per tensor.
BATCH, SEQ, INDEX_SPAN, INDEX_B, INDEX_S, BLOCK_SIZE, LIMIT, CHUNKS, COUNT = range(9)
COMMON = 9
(
    SRC_SPAN,
    DST_SPAN,
    SRC_B,
    SRC_S,
    DST_A,
    DST_B,
    N0,
    N1,
    N2,
    S0,
    S1,
    S2,
    D0,
    D1,
    D2,
    BLOCK,
) = range(16)
PLAN_SIZE = COMMON + 2 * BLOCK


@helper
def float32_to_fp8_bits(value, mantissa_bits, bias, max_bits):
    """`value` as an fp8 byte with `mantissa_bits` and exponent `bias`,
    rounded to nearest even; magnitudes above the largest finite value
    (`max_bits`) and infinities saturate to it; NaN becomes ``0x7F``."""
    bits = float32_bits(value)
    sign = np.uint32((bits >> np.uint32(24)) & np.uint32(0x80))
    magnitude = bits & np.uint32(0x7FFFFFFF)
    if magnitude > np.uint32(0x7F800000):
        return np.uint8(sign | np.uint32(0x7F))
    exponent = np.int32(magnitude >> np.uint32(23)) - 127
    if exponent < 1 - bias:
        # Subnormal in fp8 (or zero): a multiple of 2^(1 - bias - mantissa).
        scaled = abs(value) * np.float32(2.0 ** (bias - 1 + mantissa_bits))
        # Round half to even (exact for these small values).
        rounded = np.float32((scaled + np.float32(8388608.0)) - np.float32(8388608.0))
        result = np.uint32(rounded)
    else:
        drop = np.uint32(23 - mantissa_bits)
        half = (np.uint32(1) << (drop - np.uint32(1))) - np.uint32(1)
        odd = (magnitude >> drop) & np.uint32(1)
        result = (magnitude + half + odd) >> drop
        result = result - (np.uint32(127 - bias) << np.uint32(mantissa_bits))
        if exponent > 15 + bias or result > np.uint32(max_bits):
            result = np.uint32(max_bits)
    return np.uint8(sign | result)


@helper
def float32_to_fp8_e4m3_bits(value):
    # e4m3fn: no infinities, 0x7F is NaN, 0x7E (448) the largest finite.
    return float32_to_fp8_bits(value, 3, 7, 0x7E)


@helper
def float32_to_fp8_e5m2_bits(value):
    # e5m2: 0x7C is infinity, 0x7B (57344) the largest finite.
    return float32_to_fp8_bits(value, 2, 15, 0x7B)


FP8_CONVERSIONS = {
    "fp8_e4m3": float32_to_fp8_e4m3_bits,
    "fp8_e5m2": float32_to_fp8_e5m2_bits,
}


@cache
def cache_write_kernels(
    src_dtype: str, kv_cache_dtype: str, index_dtype: str, append: bool
):
    """Serial and parallel kernels
    ``run(k_dst, k_src, v_dst, v_src, index, k_scale, v_scale, plan) -> int``
    (addresses and the plan; scales are float32 addresses, read only in the
    fp8 modes). They return -1, or the flat position of the first bad index,
    in which case nothing was written."""
    fp8 = kv_cache_dtype != "auto"
    if fp8:
        src_storage, dst_storage = STORAGE[src_dtype], np.uint8
        to_fp8 = FP8_CONVERSIONS[kv_cache_dtype]
    else:
        bits = STORAGE[BITS_DTYPE[np.dtype(STORAGE[src_dtype]).itemsize]]
        src_storage = dst_storage = bits
        to_fp8 = float32_to_fp8_e4m3_bits
    load = loader(src_dtype if fp8 else "uint8")
    index_storage = STORAGE[index_dtype]

    @helper
    def copy_run(dst, to_base, d2, src, from_base, s2, count, scale, load, to_fp8):
        """Copies (converting to fp8 in the fp8 modes) `count` elements of
        `src` from `from_base`, every `s2`, to `dst` from `to_base`, every
        `d2`. Bases are unsigned: indices then skip Numba's negative-index
        wraparound, so the loops vectorise. (`load` and `to_fp8` come as
        arguments so that the kernels capturing them are cached apart.)"""
        if not fp8 and s2 == 1 and d2 == 1:
            # Unit strides spelled out: a plain copy loop.
            for e in range(count):
                offset = np.uint64(e)
                dst[to_base + offset] = src[from_base + offset]
            return
        for e in range(count):
            source = from_base + np.uint64(e * s2)
            target = to_base + np.uint64(e * d2)
            if fp8:
                dst[target] = to_fp8(np.float32(load(src, source)) / scale)
            else:
                dst[target] = src[source]

    def run(k_dst, k_src, v_dst, v_src, index_address, k_scale, v_scale, plan):
        index = element_array(index_address, plan[INDEX_SPAN], index_storage)
        batch, seq = plan[BATCH], plan[SEQ]
        index_b, index_s = plan[INDEX_B], plan[INDEX_S]
        block_size, limit = plan[BLOCK_SIZE], plan[LIMIT]
        chunks, count = plan[CHUNKS], plan[COUNT]
        tokens = batch * seq
        if append:
            for b in range(batch):
                past = np.int64(index[b * index_b])
                # `past > limit - seq`, not `past + seq > limit`: the sum
                # wraps for lengths near the int64 maximum (`seq <= limit`).
                if past < 0 or past > limit - seq:
                    return b
        else:
            for token in range(tokens):
                slot = np.int64(index[token * index_s])
                if slot >= limit:
                    return token
        scales = (np.float32(1.0), np.float32(1.0))
        if fp8:
            scales = (
                element_array(k_scale, 1, np.float32)[0],
                element_array(v_scale, 1, np.float32)[0],
            )
        for which in range(count):
            block = COMMON + which * BLOCK
            dst_address = k_dst if which == 0 else v_dst
            src_address = k_src if which == 0 else v_src
            dst = element_array(dst_address, plan[block + DST_SPAN], dst_storage)
            src = element_array(src_address, plan[block + SRC_SPAN], src_storage)
            scale = scales[0] if which == 0 else scales[1]
            src_b, src_s = plan[block + SRC_B], plan[block + SRC_S]
            dst_a, dst_b = plan[block + DST_A], plan[block + DST_B]
            n0, n1, n2 = plan[block + N0], plan[block + N1], plan[block + N2]
            s0, s1, s2 = plan[block + S0], plan[block + S1], plan[block + S2]
            d0, d1, d2 = plan[block + D0], plan[block + D1], plan[block + D2]
            if append:
                # One unit per (sequence, row of the per-token matrix),
                # copying that row for every token of the sequence: each
                # unit then walks source and cache in memory order (the
                # tokens of a head are adjacent in both), where a token-major
                # walk would interleave all the heads' streams.
                rows = n0 * n1
                units = batch * rows
                # When a row's tokens are back to back in both tensors (the
                # usual layout), a unit is one run of `seq * n2` elements.
                flat = src_s == n2 * s2 and dst_b == n2 * d2
                steps = 1 if flat else seq
                run_length = seq * n2 if flat else n2
                for chunk in prange(chunks):
                    first = chunk * units // chunks
                    last = (chunk + 1) * units // chunks
                    for unit in range(first, last):
                        b = unit // rows
                        row = unit - b * rows
                        i = row // n1
                        j = row - i * n1
                        past = np.int64(index[b * index_b])
                        src_row = b * src_b + i * s0 + j * s1
                        dst_row = b * dst_a + past * dst_b + i * d0 + j * d1
                        for s in range(steps):
                            copy_run(
                                dst,
                                np.uint64(dst_row + s * dst_b),
                                d2,
                                src,
                                np.uint64(src_row + s * src_s),
                                s2,
                                run_length,
                                scale,
                                load,
                                to_fp8,
                            )
            else:
                for chunk in prange(chunks):
                    first = chunk * tokens // chunks
                    last = (chunk + 1) * tokens // chunks
                    for token in range(first, last):
                        b = token // seq
                        s = token - b * seq
                        slot = np.int64(index[token * index_s])
                        if slot < 0:
                            continue
                        block_index = slot // block_size
                        dst_base = (
                            block_index * dst_a
                            + (slot - block_index * block_size) * dst_b
                        )
                        src_base = b * src_b + s * src_s
                        for i in range(n0):
                            for j in range(n1):
                                copy_run(
                                    dst,
                                    np.uint64(dst_base + i * d0 + j * d1),
                                    d2,
                                    src,
                                    np.uint64(src_base + i * s0 + j * s1),
                                    s2,
                                    n2,
                                    scale,
                                    load,
                                    to_fp8,
                                )
        return -1

    return kernel(run), kernel(run, parallel=True)


class CacheWrite:
    """A planned write of one or two tensors into caches.

    `pairs` holds, per tensor, ``(src meta, src token strides (b, s), dst meta,
    dst strides (a, b), per-token shape, src per-token strides, dst per-token
    strides)`` with strides in elements.
    """

    def __init__(
        self,
        *,
        src_dtype: str,
        kv_cache_dtype: str,
        index_dtype: str,
        append: bool,
        batch: int,
        seq: int,
        index_strides: tuple[int, int],
        index_span: int,
        block_size: int,
        limit: int,
        pairs,
    ) -> None:
        tokens = batch * seq
        plan = np.zeros(PLAN_SIZE, dtype=np.int64)
        plan[BATCH], plan[SEQ] = batch, seq
        plan[INDEX_B], plan[INDEX_S] = index_strides
        plan[INDEX_SPAN], plan[BLOCK_SIZE], plan[LIMIT] = index_span, block_size, limit
        plan[COUNT] = len(pairs)
        per_token = 0
        # Bytes each source and each cache reaches from its first element.
        self.source_bytes = []
        self.cache_bytes = []
        # The fewest per-token matrix rows of any pair (append-mode units).
        min_rows = 1 << 62
        for which, pair in enumerate(pairs):
            src, src_strides, dst, dst_strides, shape, inner_src, inner_dst = pair
            block = COMMON + which * BLOCK
            shape, (inner_src, inner_dst) = coalesce(shape, [inner_src, inner_dst])
            if not shape:
                shape, inner_src, inner_dst = (1,), (0,), (0,)
            padding = 3 - len(shape)
            shape = (1,) * padding + tuple(shape)
            inner_src = (0,) * padding + tuple(inner_src)
            inner_dst = (0,) * padding + tuple(inner_dst)
            plan[block + SRC_SPAN] = span(src.shape, src.strides)
            plan[block + DST_SPAN] = span(dst.shape, dst.strides)
            self.source_bytes.append(int(plan[block + SRC_SPAN]) * src.element_size)
            self.cache_bytes.append(int(plan[block + DST_SPAN]) * dst.element_size)
            plan[block + SRC_B], plan[block + SRC_S] = src_strides
            plan[block + DST_A], plan[block + DST_B] = dst_strides
            plan[block + N0 : block + N2 + 1] = shape
            plan[block + S0 : block + S2 + 1] = inner_src
            plan[block + D0 : block + D2 + 1] = inner_dst
            per_token += int(np.prod(shape))
            min_rows = min(min_rows, shape[0] * shape[1])
        self.empty = tokens == 0
        work = tokens * per_token
        # Append mode parallelises over (sequence, matrix row) units, slot
        # mode over tokens; a chunk holds about CHUNK_ELEMENTS elements.
        units = batch * min_rows if append else tokens
        if work < PARALLEL_THRESHOLD or units == 1:
            chunks = 1
        else:
            chunks = min(units, -(-work // CHUNK_ELEMENTS))
        plan[CHUNKS] = chunks
        self.plan = plan
        # "fp8" is e4m3: one kernel serves both names.
        mode = "fp8_e4m3" if kv_cache_dtype == "fp8" else kv_cache_dtype
        serial, parallel = cache_write_kernels(src_dtype, mode, index_dtype, append)
        self.kernel = parallel if chunks > 1 else serial
        # Caches and sources found not to overlap.
        self.apart = KnownAddresses()

    def bind(self, k_dst, k_src, v_dst, v_src, index, fail):
        """`__call__` on these addresses (unscaled) as a callable of no
        arguments (`Operator.bind_launch`), or `None` where a source lies in
        a cache (copied aside per call); a bad slot goes to ``fail(index)``."""
        if self.empty:
            return do_nothing
        if (k_dst, k_src, v_dst, v_src) not in self.apart:
            return None
        arguments = (k_dst, k_src, v_dst, v_src, index, 0, 0, self.plan)
        return checked(self.kernel, arguments, fail)

    def __call__(self, k_dst, k_src, v_dst, v_src, index, k_scale=0, v_scale=0) -> int:
        if self.empty:
            return -1
        addresses = (k_dst, k_src, v_dst, v_src)
        if addresses in self.apart:
            return self.kernel(
                k_dst, k_src, v_dst, v_src, index, k_scale, v_scale, self.plan
            )
        caches = list(zip((k_dst, v_dst), self.cache_bytes))
        sources = [k_src, v_src]
        aside = []
        for which, nbytes in enumerate(self.source_bytes):
            start = sources[which]
            if any(
                start < address + reach and address < start + nbytes
                for address, reach in caches
            ):
                # A view of a cache: the tokens it holds may be overwritten
                # before they are read, so read them from a copy.
                copy = np.empty(nbytes, np.uint8)
                ctypes.memmove(copy.ctypes.data, start, nbytes)
                aside.append(copy)
                sources[which] = copy.ctypes.data
        if not aside:
            self.apart.remember(addresses)
        return self.kernel(
            k_dst, sources[0], v_dst, sources[1], index, k_scale, v_scale, self.plan
        )
