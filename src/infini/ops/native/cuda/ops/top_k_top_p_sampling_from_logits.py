"""CUDA-like `top_k_top_p_sampling_from_logits` (slot 0) in Triton: a tile
of rows per program (one row for large vocabularies), each row walked in
wide blocks by the passes of `native/cuda/sampling.py`.

Every row starts with `argmax_pass`. A row whose top-k is 1 (or whose
maximum is NaN or infinite, where the CPU kernel's probabilities are NaN and
it returns the first largest logit) takes the argmax. When every row does,
which the host sees on the `top_k` tensor it holds, the launch is the
greedy kernel: that one pass and the store, as the model runner's greedy
decoding needs it. Otherwise, per row, as the CPU kernel's `sample_row`:

- no filter (top-k off, ``top_p >= 1``): inverse-transform sampling in
  index order against ``u * sum(exp(x - max))`` (`index_order_pass`);
- otherwise, in rank order: the mass of the top `k` (`rank_search` by
  count) normalises top-p for "top_k_first" (the whole row's sum for
  "joint"); the top-p cut is the first rank whose running mass reaches
  ``top_p`` times that (`rank_search` by mass), at most `k` ranks; the token
  is the first rank whose running mass exceeds ``u`` times the kept mass.

``u = uniform(seed, offset, row)`` is the CPU kernels' counter-based
generator: the host hashes seed and offset (`call_state`), the kernel the
row. The per-call values (the state, each row's clamped top-k and top-p)
reach the kernel in one small int64 tensor copied to the device on the
caller's stream; `top_k` and `top_p` are read on the host, where the base
keeps them.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from infini.ops.base.top_k_top_p_sampling_from_logits import (
    TopKTopPSamplingFromLogits,
)
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.sampling import (
    SamplingTiles,
    argmax_pass,
    as_int64,
    call_state,
    draw_seed,
    float_bits,
    index_order_pass,
    order_key,
    rank_search,
    total_pass,
    uniform,
)
from infini.ops.runtime.triton import (
    Kernel,
    OverlapGuard,
    Pointer,
    require_device,
    staging_like,
    torch_device,
)


@triton.jit
def top_k_top_p_kernel(
    out,
    logits,
    indices,
    params,
    rows,
    vocab,
    logits_row,
    logits_step,
    index_step,
    out_step,
    k_step,
    p_offset,
    p_step,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    DIGIT_BLOCK: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    GREEDY: tl.constexpr,
    JOINT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    if HAS_INDICES:
        source = tl.load(indices + row * index_step, mask=row_mask, other=0)
        source = source.to(tl.int64)
    else:
        source = row
    base = source * logits_row
    best, maximum, lowest = argmax_pass(
        logits, base, row_mask, vocab, logits_step, ROWS, BLOCK
    )
    result = best
    if not GREEDY:
        # `params`: the generator state, then each row's top-k (clamped to
        # `vocab` when off), then each row's top-p (float64 bits).
        k = tl.load(params + 1 + row * k_step, mask=row_mask, other=1)
        p = tl.load(params + p_offset + row * p_step, mask=row_mask, other=0)
        p = p.to(tl.float64, bitcast=True)
        state = tl.load(params).to(tl.uint64, bitcast=True)
        u = uniform(state, row)
        highest = order_key(maximum)
        finite = (maximum == maximum) & (tl.abs(maximum) != float("inf"))
        sampling = row_mask & (k != 1) & finite
        filtered = sampling & ((k < vocab) | (p < 1.0))
        plain = sampling & (~filtered)
        if tl.max(plain.to(tl.int32), axis=0) > 0:
            total = total_pass(
                logits, base, plain, vocab, logits_step, maximum, 1.0, ROWS, BLOCK,
                False,
            )  # fmt: skip
            chosen = index_order_pass(
                logits, base, plain, vocab, logits_step, maximum, u * total, ROWS,
                BLOCK,
            )  # fmt: skip
            result = tl.where(plain & (chosen >= 0), chosen, result)
        if tl.max(filtered.to(tl.int32), axis=0) > 0:
            top_k = filtered & (k < vocab)
            if JOINT:
                whole = filtered
            else:
                whole = filtered & (k >= vocab)
            total = tl.zeros([ROWS], tl.float64)
            if tl.max(whole.to(tl.int32), axis=0) > 0:
                total = total_pass(
                    logits, base, whole, vocab, logits_step, maximum, 1.0, ROWS,
                    BLOCK, False,
                )  # fmt: skip
            # The token of rank `count - 1` and the mass of the ranks up to
            # it: the top-k boundary, moved up by the top-p cut below.
            # Its order key bounds the keys of the searches that follow.
            count = k
            last = tl.full([ROWS], -1, tl.int64)
            kept_mass = total
            last_key = lowest
            if tl.max(top_k.to(tl.int32), axis=0) > 0:
                index, rank, mass, key, found = rank_search(
                    logits, base, top_k, vocab, logits_step, maximum, 1.0, k,
                    lowest, highest, False, False, True, ROWS, BLOCK, DIGIT_BLOCK,
                    False,
                )  # fmt: skip
                last = tl.where(top_k, index, last)
                kept_mass = tl.where(top_k, mass, kept_mass)
                last_key = tl.where(top_k, key, last_key)
            if JOINT:
                normaliser = total
            else:
                normaliser = kept_mass
            nucleus = filtered & (p < 1.0)
            if tl.max(nucleus.to(tl.int32), axis=0) > 0:
                index, rank, mass, key, found = rank_search(
                    logits, base, nucleus, vocab, logits_step, maximum, 1.0,
                    p * normaliser, last_key, highest, True, False, True, ROWS,
                    BLOCK, DIGIT_BLOCK, False,
                )  # fmt: skip
                cut = nucleus & found & (rank + 1 < count)
                count = tl.where(cut, rank + 1, count)
                last = tl.where(cut, index, last)
                kept_mass = tl.where(cut, mass, kept_mass)
                last_key = tl.where(cut, key, last_key)
            index, rank, mass, key, found = rank_search(
                logits, base, filtered, vocab, logits_step, maximum, 1.0,
                u * kept_mass, last_key, highest, True, True, True, ROWS, BLOCK,
                DIGIT_BLOCK, False,
            )  # fmt: skip
            chosen = found & (rank < count)
            # Rounding left the draw past the kept mass: the last kept token,
            # found by rank when no search above named it.
            missing = filtered & (~chosen) & (last < 0)
            if tl.max(missing.to(tl.int32), axis=0) > 0:
                fallback, rank, mass, key, found = rank_search(
                    logits, base, missing, vocab, logits_step, maximum, 1.0, count,
                    lowest, highest, False, False, False, ROWS, BLOCK, DIGIT_BLOCK,
                    False,
                )  # fmt: skip
                last = tl.where(missing, fallback, last)
            picked = tl.where(chosen, index, last)
            result = tl.where(filtered & (picked >= 0), picked, result)
    tl.store(out + row * out_step, result.to(out.dtype.element_ty), mask=row_mask)


KERNEL = Kernel(top_k_top_p_kernel)


@implementation(
    operator="top_k_top_p_sampling_from_logits", devices="cuda_like", slot=0
)
class CudaTopKTopPSamplingFromLogits(TopKTopPSamplingFromLogits):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        logits, indices, out = args.logits, args.indices, args.out
        self.logit_rows = logits.shape[0]
        self.empty = self.rows == 0
        self.broadcast_k = args.top_k.shape[0] == 1
        self.broadcast_p = args.top_p.shape[0] == 1
        tiles = SamplingTiles(self.vocab, self.rows)
        values_k = 1 if self.broadcast_k else self.rows
        arguments = (
            out,
            logits,
            indices if indices is not None else Pointer("int64"),
            Pointer("int64"),
            self.rows,
            self.vocab,
            logits.strides[0],
            logits.strides[1],
            indices.strides[0] if indices is not None else 0,
            out.strides[0],
            0 if self.broadcast_k else 1,
            1 + values_k,
            0 if self.broadcast_p else 1,
        )
        grid = (-(-self.rows // tiles.rows),)
        constexprs = {
            "ROWS": tiles.rows,
            "DIGIT_BLOCK": tiles.digit_block,
            "HAS_INDICES": indices is not None,
            "JOINT": self.joint,
        }
        self.greedy = KERNEL.bind(
            grid=grid,
            arguments=arguments,
            constexprs={**constexprs, "BLOCK": tiles.block, "GREEDY": True},
            device=self.device,
            num_warps=tiles.num_warps,
        )
        self.sampled = KERNEL.bind(
            grid=grid,
            arguments=arguments,
            constexprs={**constexprs, "BLOCK": tiles.sample_block, "GREEDY": False},
            device=self.device,
            num_warps=tiles.num_warps,
        )
        inputs = (logits,) if indices is None else (logits, indices)
        self.overlap = OverlapGuard(out, inputs)

    def _check(self, logits, indices) -> None:
        """The checks the CPU kernel makes before writing (they synchronise
        with the device, and only run when asked for or given indices)."""
        import torch

        if self.check_nan and bool(torch.isnan(logits).any()):
            raise self.error("`logits` contains NaN (`check_nan` is set).")
        if indices is not None:
            low, high = int(indices.min()), int(indices.max())
            if low < 0 or high >= self.logit_rows:
                raise self.error(
                    f"`indices` must be in [0, {self.logit_rows}) (rows of "
                    f"`logits`), got values in [{low}, {high}]."
                )

    def launch(self, stream, logits, top_k, top_p, indices, out) -> None:
        if self.empty:
            return
        import torch

        if self.check_nan or indices is not None:
            with stream_context(self.device, stream):
                self._check(logits, indices)
        # The CPU kernel draws a seed whether or not it is used: so does
        # this one, to leave torch's generator in the same state.
        seed = draw_seed() if self.seed is None else self.seed
        k = top_k.cpu().numpy().astype(np.int64)
        k = np.where((k > 0) & (k < self.vocab), k, self.vocab)
        greedy = bool((k == 1).all())
        index_tensor = logits if indices is None else indices
        inputs = (logits,) if indices is None else (logits, indices)
        if greedy and not self.overlap(out, inputs):
            self.greedy(stream, out, logits, index_tensor, logits)
            return
        with stream_context(self.device, stream):
            target = staging_like(out) if self.overlap(out, inputs) else out
            if greedy:
                self.greedy(stream, target, logits, index_tensor, logits)
            else:
                p = top_p.cpu().numpy()
                state = as_int64(call_state(seed, self.offset))
                values = np.concatenate((np.array([state], np.int64), k, float_bits(p)))
                params = torch.from_numpy(values).to(
                    torch_device(self.device), non_blocking=True
                )
                self.sampled(stream, target, logits, index_tensor, params)
            if target is not out:
                out.copy_(target)
