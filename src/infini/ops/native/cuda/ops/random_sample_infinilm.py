"""CUDA-like `random_sample_infinilm` (slot 0) in Triton: one program walks
the row in wide blocks with the passes of `native/cuda/sampling.py`.

The host decides, from the call's scalars, between the two launches:

- the argmax (``random_val``, ``topp`` or ``temperature`` zero, or
  ``topk <= 1``): `argmax_pass`, the first largest logit (NaN largest);
- the sampled token, in float64 as the CPU kernel: with ``w = exp((x -
  max) / temperature)``, ``Z`` their sum (`total_pass`) and ``kept =
  min(topk, vocab)``, the mass of the top `kept` ranks (`rank_search` by
  count) and the threshold ``min(that, topp * Z) * random_val``; the token
  is the first rank whose running mass reaches the threshold (`rank_search`
  by mass), at most rank ``kept - 1``. When the maximum is NaN or infinite
  the CPU kernel's probabilities are NaN and no rank reaches its
  threshold: both return the token of rank ``kept - 1``.

The sampled launch reads its per-call values (``random_val``, ``topp``,
``1 / temperature``, ``kept``) from a four-element float64 tensor copied to
the device on the caller's stream, so new values never build a new
operator.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.random_sample_infinilm import RandomSampleInfinilm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.sampling import (
    SamplingTiles,
    argmax_pass,
    order_key,
    rank_search,
    total_pass,
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
def random_sample_kernel(
    out,
    logits,
    params,
    vocab,
    step,
    BLOCK: tl.constexpr,
    DIGIT_BLOCK: tl.constexpr,
    SAMPLE: tl.constexpr,
):
    row = tl.arange(0, 1).to(tl.int64)
    row_mask = row == 0
    base = row * 0
    best, maximum, lowest = argmax_pass(logits, base, row_mask, vocab, step, 1, BLOCK)
    result = best
    if SAMPLE:
        random_val = tl.load(params + row)
        topp = tl.load(params + row + 1)
        scale = tl.load(params + 2)
        kept = tl.load(params + row + 3).to(tl.int64)
        total = total_pass(
            logits, base, row_mask, vocab, step, maximum, scale, 1, BLOCK, True
        )
        highest = order_key(maximum)
        # The token of rank `kept - 1`, the mass up to it and its order key
        # (the smallest the sampled token can have).
        last = tl.full([1], -1, tl.int64)
        kept_mass = total
        last_key = lowest
        top_k = kept < vocab
        if tl.max(top_k.to(tl.int32), axis=0) > 0:
            index, rank, mass, key, found = rank_search(
                logits, base, top_k, vocab, step, maximum, scale, kept, lowest,
                highest, False, False, True, 1, BLOCK, DIGIT_BLOCK, True,
            )  # fmt: skip
            last = index
            kept_mass = mass
            last_key = key
        finite = (maximum == maximum) & (tl.abs(maximum) != float("inf"))
        threshold = tl.minimum(kept_mass, topp * total) * random_val
        index, rank, mass, key, found = rank_search(
            logits, base, finite, vocab, step, maximum, scale, threshold, last_key,
            highest, True, False, True, 1, BLOCK, DIGIT_BLOCK, True,
        )  # fmt: skip
        chosen = finite & found & (rank < kept)
        missing = (~chosen) & (last < 0)
        if tl.max(missing.to(tl.int32), axis=0) > 0:
            fallback, rank, mass, key, found = rank_search(
                logits, base, missing, vocab, step, maximum, scale, kept, lowest,
                highest, False, False, False, 1, BLOCK, DIGIT_BLOCK, True,
            )  # fmt: skip
            last = tl.where(missing, fallback, last)
        picked = tl.where(chosen, index, last)
        result = tl.where(picked >= 0, picked, result)
    tl.store(out + row, result.to(out.dtype.element_ty), mask=row_mask)


KERNEL = Kernel(random_sample_kernel)


@implementation(operator="random_sample_infinilm", devices="cuda_like", slot=0)
class CudaRandomSampleInfinilm(RandomSampleInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        logits, out = args.logits, args.out
        tiles = SamplingTiles(self.vocab, 1)
        arguments = (out, logits, Pointer("float64"), self.vocab, logits.strides[0])
        digits = tiles.digit_block
        self.argmax = KERNEL.bind(
            grid=(1,),
            arguments=arguments,
            constexprs={"BLOCK": tiles.block, "DIGIT_BLOCK": digits, "SAMPLE": False},
            device=self.device,
            num_warps=tiles.num_warps,
        )
        self.sampled = KERNEL.bind(
            grid=(1,),
            arguments=arguments,
            constexprs={
                "BLOCK": tiles.sample_block,
                "DIGIT_BLOCK": digits,
                "SAMPLE": True,
            },
            device=self.device,
            num_warps=tiles.num_warps,
        )
        self.overlap = OverlapGuard(out, (logits,))

    def launch(self, stream, logits, out) -> None:
        sample = (
            self.random_val > 0.0
            and self.topp > 0.0
            and self.topk > 1
            and self.temperature > 0.0
        )
        staged = self.overlap(out, (logits,))
        if not sample and not staged:
            self.argmax(stream, out, logits, logits)
            return
        import torch

        with stream_context(self.device, stream):
            target = staging_like(out) if staged else out
            if sample:
                values = (
                    self.random_val,
                    self.topp,
                    1.0 / self.temperature,
                    float(min(self.topk, self.vocab)),
                )
                params = torch.tensor(values, dtype=torch.float64).to(
                    torch_device(self.device), non_blocking=True
                )
                self.sampled(stream, target, logits, params)
            else:
                self.argmax(stream, target, logits, logits)
            if target is not out:
                out.copy_(target)
