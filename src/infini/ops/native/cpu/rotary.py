"""Rotary position embedding kernels (`rotary_embedding`,
`rotary_embedding_infinilm`).

One kernel rotates one tensor of shape ``(batch, seq, heads, head)`` (the
token dimensions may be a single one: ``batch == 1``) from `src` into `dst`,
which may be the same memory (in place). Per token it reads the position,
gathers that position's cosines and sines into float32 buffers (shared by
every head), then rotates the ``2 * half`` elements of each head that start
at `rot_offset`. Everything else in a head is left alone. Tokens run in
parallel chunks on the pool above a size threshold and on the calling thread
below it (a decode step's few tokens); the pair loop walks elements with a
compile-time unit step when both tensors are contiguous along the head, so
it vectorises.

Every integer the kernel needs is packed into one int64 `plan` array built
when the operator is built, which keeps a launch cheap.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from infini.ops.core.geometry import span

from .binding import checked, do_nothing
from .dtype_io import loader, storer
from .jit import kernel
from .memory import STORAGE, element_array

# Work (rotated elements) per parallel chunk, and the amount below which
# the kernel runs as one chunk: waking the thread pool costs more than it
# saves.
CHUNK_ELEMENTS = 32768
PARALLEL_THRESHOLD = 65536

# Positions in the `plan` array.
(
    DST_SPAN,
    SRC_SPAN,
    POS_SPAN,
    COS_SPAN,
    SIN_SPAN,
    BATCH,
    SEQ,
    HEADS,
    POS_B,
    POS_S,
    SRC_B,
    SRC_S,
    SRC_H,
    SRC_E,
    DST_B,
    DST_S,
    DST_H,
    DST_E,
    COS_ROW,
    COS_COL,
    SIN_ROW,
    SIN_COL,
    ROT_OFFSET,
    HALF,
    MAX_POSITION,
    CHUNKS,
    PLAN_SIZE,
) = range(27)


@cache
def rotary_kernels(
    data_dtype: str,
    table_dtype: str,
    position_dtype: str,
    neox: bool,
    unit_step: bool,
):
    """The serial and the parallel kernel ``run(dst, src, positions, cos,
    sin, plan, sign) -> int`` (addresses, the plan, and -1.0 to invert). Each
    returns -1, or the flat token index of the first position outside
    ``[0, max_position)``, in which case nothing was written.

    The serial kernel runs every token on the calling thread (one chunk:
    small work, where waking the pool costs more than it saves, and on a
    busy machine a scheduler time slice); the parallel one runs the plan's
    chunks on the pool. Both call the same body (`rotary_body`) per chunk."""
    body = rotary_body(data_dtype, table_dtype, neox, unit_step)
    data_storage = STORAGE[data_dtype]
    table_storage = STORAGE[table_dtype]
    position_storage = STORAGE[position_dtype]

    def run(
        dst_address, src_address, pos_address, cos_address, sin_address, plan, sign
    ):
        dst = element_array(dst_address, plan[DST_SPAN], data_storage)
        src = element_array(src_address, plan[SRC_SPAN], data_storage)
        pos = element_array(pos_address, plan[POS_SPAN], position_storage)
        cos = element_array(cos_address, plan[COS_SPAN], table_storage)
        sin = element_array(sin_address, plan[SIN_SPAN], table_storage)
        seq, pos_b, pos_s = plan[SEQ], plan[POS_B], plan[POS_S]
        max_position, chunks = plan[MAX_POSITION], plan[CHUNKS]
        tokens = plan[BATCH] * seq
        # Every position is checked before anything is written.
        for token in range(tokens):
            b = token // seq
            position = np.int64(pos[b * pos_b + (token - b * seq) * pos_s])
            if position < 0 or position >= max_position:
                return token
        sin_sign = np.float32(sign)
        for chunk in prange(chunks):
            first = chunk * tokens // chunks
            last = (chunk + 1) * tokens // chunks
            body(dst, src, pos, cos, sin, plan, sin_sign, first, last)
        return -1

    # The drivers capture the body, and the on-disk cache keys captured
    # functions on their qualified names: make the name say the variant.
    run.__qualname__ += (
        f"[{data_dtype},{table_dtype},{position_dtype},{neox},{unit_step}]"
    )
    return kernel(run), kernel(run, parallel=True)


@cache
def rotary_body(data_dtype: str, table_dtype: str, neox: bool, unit_step: bool):
    """Rotates tokens `first` to `last` (flat indices) of the plan: per
    token, gathers the position's cosines and sines into float32 buffers
    (shared by every head), then rotates each head's pairs."""
    load, store = loader(data_dtype), storer(data_dtype)
    load_table = loader(table_dtype)

    def rotate(dst, src, pos, cos, sin, plan, sin_sign, first, last):
        seq, heads = plan[SEQ], plan[HEADS]
        pos_b, pos_s = plan[POS_B], plan[POS_S]
        src_b, src_s, src_h = plan[SRC_B], plan[SRC_S], plan[SRC_H]
        dst_b, dst_s, dst_h = plan[DST_B], plan[DST_S], plan[DST_H]
        src_e = 1 if unit_step else plan[SRC_E]
        dst_e = 1 if unit_step else plan[DST_E]
        cos_row, cos_col = plan[COS_ROW], plan[COS_COL]
        sin_row, sin_col = plan[SIN_ROW], plan[SIN_COL]
        rot_offset, half = plan[ROT_OFFSET], plan[HALF]
        cos_buffer = np.empty(half, np.float32)
        sin_buffer = np.empty(half, np.float32)
        # One head's pairs, widened: reading them all before writing any
        # keeps the in-place case right, and loops that only convert, or
        # only compute and convert back, vectorise for 16-bit data where
        # one loop doing both stays scalar.
        first_values = np.empty(half, np.float32)
        second_values = np.empty(half, np.float32)
        for token in range(first, last):
            b = token // seq
            s = token - b * seq
            position = np.int64(pos[b * pos_b + s * pos_s])
            for i in range(half):
                cos_buffer[i] = np.float32(
                    load_table(cos, position * cos_row + i * cos_col)
                )
                sin_buffer[i] = sin_sign * np.float32(
                    load_table(sin, position * sin_row + i * sin_col)
                )
            src_token = b * src_b + s * src_s + rot_offset * src_e
            dst_token = b * dst_b + s * dst_s + rot_offset * dst_e
            # NeoX pairs element i with i + half; GPT-J pairs 2i with 2i + 1.
            src_pair = half * src_e if neox else src_e
            dst_pair = half * dst_e if neox else dst_e
            src_step = src_e if neox else 2 * src_e
            dst_step = dst_e if neox else 2 * dst_e
            for h in range(heads):
                src_base = src_token + h * src_h
                dst_base = dst_token + h * dst_h
                # Unsigned indices: Numba then skips its negative-index
                # wraparound, which would keep these loops scalar.
                for i in range(half):
                    at = np.uint64(src_base + i * src_step)
                    first_values[np.uint64(i)] = np.float32(load(src, at))
                    second_values[np.uint64(i)] = np.float32(
                        load(src, at + np.uint64(src_pair))
                    )
                for i in range(half):
                    x = first_values[np.uint64(i)]
                    y = second_values[np.uint64(i)]
                    c = cos_buffer[np.uint64(i)]
                    n = sin_buffer[np.uint64(i)]
                    at = np.uint64(dst_base + i * dst_step)
                    store(dst, at, x * c - y * n)
                    store(dst, at + np.uint64(dst_pair), y * c + x * n)

    rotate.__qualname__ += f"[{data_dtype},{table_dtype},{neox},{unit_step}]"
    return kernel(rotate, fastmath={"contract"})


class RotaryLaunch:
    """One planned rotation of a tensor seen as ``(batch, seq, heads, head)``.

    `tokens_shape` is the positions' shape (1-D or 2-D); strides are in
    elements: `src`/`dst` as ``(token strides..., head, element)``,
    `positions` as its own strides, each table as ``(row, column)``.
    """

    def __init__(
        self,
        *,
        data_dtype: str,
        table_dtype: str,
        position_dtype: str,
        neox: bool,
        tokens_shape,
        heads: int,
        head_size: int,
        src_strides,
        dst_strides,
        position_strides,
        max_position: int,
        half: int,
        rot_offset: int,
        cos_strides,
        sin_strides,
        inverse: bool,
    ) -> None:
        if len(tokens_shape) == 1:
            batch, seq = 1, tokens_shape[0]
            position_strides = (0,) + tuple(position_strides)
            src_strides = (0,) + tuple(src_strides)
            dst_strides = (0,) + tuple(dst_strides)
        else:
            batch, seq = tokens_shape
        tokens = batch * seq
        # Whole tensor shapes, for the spans the kernel may reach.
        data_shape = (batch, seq, heads, head_size)
        table_shape = (max_position, half)
        self.numel = tokens * heads * half
        self.tokens = tokens
        work = self.numel
        if work < PARALLEL_THRESHOLD or tokens == 1:
            chunks = 1
        else:
            per_chunk = max(1, CHUNK_ELEMENTS // max(heads * half, 1))
            chunks = min(tokens, -(-tokens // per_chunk))
        plan = np.zeros(PLAN_SIZE, dtype=np.int64)
        plan[DST_SPAN] = span(data_shape, dst_strides)
        plan[SRC_SPAN] = span(data_shape, src_strides)
        plan[POS_SPAN] = span(
            tuple(tokens_shape), position_strides[-len(tokens_shape) :]
        )
        plan[COS_SPAN] = span(table_shape, cos_strides)
        plan[SIN_SPAN] = span(table_shape, sin_strides)
        plan[BATCH], plan[SEQ], plan[HEADS] = batch, seq, heads
        plan[POS_B], plan[POS_S] = position_strides
        plan[SRC_B], plan[SRC_S], plan[SRC_H], plan[SRC_E] = src_strides
        plan[DST_B], plan[DST_S], plan[DST_H], plan[DST_E] = dst_strides
        plan[COS_ROW], plan[COS_COL] = cos_strides
        plan[SIN_ROW], plan[SIN_COL] = sin_strides
        plan[ROT_OFFSET], plan[HALF] = rot_offset, half
        plan[MAX_POSITION], plan[CHUNKS] = max_position, chunks
        self.plan = plan
        self.sign = -1.0 if inverse else 1.0
        unit_step = src_strides[-1] == 1 and dst_strides[-1] == 1
        serial, parallel = rotary_kernels(
            data_dtype, table_dtype, position_dtype, neox, unit_step
        )
        self.kernel = parallel if chunks > 1 else serial

    def __call__(
        self, dst_address, src_address, pos_address, cos_address, sin_address
    ) -> int:
        """Runs the rotation; returns -1 or the flat index of the first bad
        position (nothing written then)."""
        if self.tokens == 0:
            return -1
        return self.kernel(
            dst_address,
            src_address,
            pos_address,
            cos_address,
            sin_address,
            self.plan,
            self.sign,
        )

    def bind(self, dst_address, src_address, pos_address, cos_address, sin_address,
             fail):  # fmt: skip
        """`__call__` on these addresses as a callable of no arguments
        (`Operator.bind_launch`); a bad position goes to ``fail(index)``."""
        if self.tokens == 0:
            return do_nothing
        addresses = (dst_address, src_address, pos_address, cos_address, sin_address)
        return checked(self.kernel, (*addresses, self.plan, self.sign), fail)
