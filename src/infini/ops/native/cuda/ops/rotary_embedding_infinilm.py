"""CUDA-like `rotary_embedding_infinilm` (slot 0) in Triton: InfiniLM RoPE
with separate sine and cosine tables, from `input` into `out`.

The rows are the (token, head) pairs of ``(batch, seq, heads, head)`` (3-D
input is one batch entry), flattened; a program takes a tile of ``ROWS``
consecutive rows and their whole heads, so every element is read and
written by the program that owns its row (`out` may be `input`). Cosines
and sines are gathered per row from the position's row of the tables. The
pairing decides how a head is read, both ways with contiguous loads:

- half-split (``is_neox=False``): the halves ``x[:half]`` and ``x[half:]``
  are two ``[ROWS, HALF]`` tiles;
- interleaved (``is_neox=True``, the reverse of vLLM's naming, as in the
  original): the head is one ``[ROWS, 2 * HALF]`` tile, reshaped to
  ``[ROWS, HALF, 2]`` and split into its even and odd elements, then joined
  back for the store.

Everything is computed in float32 and rounded once. Positions are checked
against the tables before the launch (`check_positions`, a scan on the
device: a bad one raises `ValueError` and nothing is written). An `out`
overlapping an input other than element for element is written through a
staging buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.rotary_embedding_infinilm import RotaryEmbeddingInfinilm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as, store_as
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    next_power_of_two,
    require_device,
    staging_like,
)

# Elements of a head a program covers (rows x head); the interpreter runs a
# program as NumPy steps, so it takes many.
GPU_TILE = 4096
INTERPRETER_TILE = 65536


@triton.jit
def rotary_embedding_infinilm_kernel(
    out,
    input,
    pos_ids,
    sin_table,
    cos_table,
    rows,
    heads,
    seq,
    input_stride0,
    input_stride1,
    input_head_stride,
    input_step,
    out_stride0,
    out_stride1,
    out_head_stride,
    out_step,
    position_stride0,
    position_stride1,
    sin_row_stride,
    sin_step,
    cos_row_stride,
    cos_step,
    ROWS: tl.constexpr,
    HALF: tl.constexpr,
    PAIRS: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    token = row // heads
    head = row % heads
    outer = token // seq
    inner = token % seq
    position = tl.load(
        pos_ids + outer * position_stride0 + inner * position_stride1,
        mask=row_mask,
        other=0,
    ).to(tl.int64)[:, None]
    input_base = outer * input_stride0 + inner * input_stride1
    input_base = (input_base + head * input_head_stride)[:, None]
    out_base = outer * out_stride0 + inner * out_stride1
    out_base = (out_base + head * out_head_stride)[:, None]
    pair = tl.arange(0, PAIRS)[None, :]
    pair_mask = row_mask[:, None] & (pair < HALF)
    cos = load_as(
        cos_table + position * cos_row_stride + pair * cos_step, pair_mask, tl.float32
    )
    sin = load_as(
        sin_table + position * sin_row_stride + pair * sin_step, pair_mask, tl.float32
    )
    if INTERLEAVED:
        # One contiguous read of the head; the pairs are its (even, odd)
        # elements.
        column = tl.arange(0, 2 * PAIRS)[None, :]
        mask = row_mask[:, None] & (column < 2 * HALF)
        head_values = load_as(
            input + input_base + column * input_step, mask, tl.float32
        )
        x, y = tl.split(tl.reshape(head_values, [ROWS, PAIRS, 2]))
        rotated = tl.join(x * cos - y * sin, y * cos + x * sin)
        store_as(
            out + out_base + column * out_step,
            tl.reshape(rotated, [ROWS, 2 * PAIRS]),
            mask,
        )
    else:
        x = load_as(input + input_base + pair * input_step, pair_mask, tl.float32)
        y = load_as(
            input + input_base + (pair + HALF) * input_step, pair_mask, tl.float32
        )
        store_as(out + out_base + pair * out_step, x * cos - y * sin, pair_mask)
        store_as(
            out + out_base + (pair + HALF) * out_step, y * cos + x * sin, pair_mask
        )


KERNEL = Kernel(rotary_embedding_infinilm_kernel)


@implementation(operator="rotary_embedding_infinilm", devices="cuda_like", slot=0)
class CudaRotaryEmbeddingInfinilm(RotaryEmbeddingInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, pos_ids, out = args.input, args.pos_ids, args.out
        sin_table, cos_table = args.sin_table, args.cos_table
        heads, head_size = input.shape[-2], input.shape[-1]
        half = head_size // 2

        def token_strides(meta):
            # 3-D tensors are one batch entry: (0, seq stride).
            return meta.strides[:2] if meta.ndim == 4 else (0, meta.strides[0])

        if pos_ids.ndim == 2:
            position_strides = pos_ids.strides
        else:
            # `(seq,)` positions, shared by every batch entry of 4-D input.
            position_strides = (0, pos_ids.strides[0])
        seq = input.shape[-3]
        tokens = 1
        for size in input.shape[:-2]:
            tokens *= size
        self.rows = rows = tokens * heads
        pairs = next_power_of_two(max(half, 1))
        tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
        per_program = max(1, min(tile // (2 * pairs), next_power_of_two(max(rows, 1))))
        self._launch = KERNEL.bind(
            grid=(-(-rows // per_program),),
            arguments=(
                out,
                input,
                pos_ids,
                sin_table,
                cos_table,
                rows,
                max(heads, 1),
                max(seq, 1),
                *token_strides(input),
                *input.strides[-2:],
                *token_strides(out),
                *out.strides[-2:],
                *position_strides,
                *sin_table.strides,
                *cos_table.strides,
            ),
            constexprs={
                "ROWS": per_program,
                "HALF": half,
                "PAIRS": pairs,
                "INTERLEAVED": bool(args.is_neox),
            },
            device=self.device,
            num_warps=4 if per_program * 2 * pairs <= 2048 else 8,
        )
        self.overlap = OverlapGuard(out, (input, pos_ids, sin_table, cos_table))

    def launch(self, stream, input, pos_ids, sin_table, cos_table, out) -> None:
        if self.rows == 0:
            return
        inputs = (input, pos_ids, sin_table, cos_table)
        with stream_context(self.device, stream):
            self.check_positions(pos_ids)
            if self.overlap(out, inputs):
                staging = staging_like(out)
                self._launch(stream, staging, *inputs)
                out.copy_(staging)
                return
        self._launch(stream, out, *inputs)
