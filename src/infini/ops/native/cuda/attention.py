"""What the CUDA-like attention kernels over InfiniLM's paged KV cache share
(`ops/paged_attention_infinilm.py`, decode; `ops/paged_attention_prefill_infinilm.py`,
prefill).

- The cache layout: `k_cache` and `v_cache` are ``(blocks, kv_heads,
  block_size, head_size)`` with any strides; token `j` of sequence `s` lives
  in block ``block_tables[s, j // block_size]`` at offset ``j % block_size``.
  `cache_slots` turns a vector of token positions into their blocks and
  offsets, reading the block table once per token, for the keys and the
  values alike; a kernel then loads ``(tokens, features)`` tiles through the
  row offsets (contiguous along the features when the cache is).
- The index check (`check_paged_indices`): the values of `seq_lens`,
  `block_tables` and `cum_seq_lens_q` are validated on the device with a few
  reductions and one transfer to the host; only when something is wrong
  does the base's element-by-element scan (`check_indices`) run, for the
  message. Nothing is launched before it passes.
- Overlap handling (`launch_or_stage`): `out` may be `q` itself, element for
  element (a program reads its query rows before it writes the same rows);
  any other overlap with an input goes through a staging buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.core.streams import stream_context
from infini.ops.runtime.triton import staging_like


@triton.jit
def cache_slots(table_row, table_step, token, mask, block_size):
    """The cache block (int64) and the offset in it of each `token`, through
    the block table row at `table_row`; masked tokens get block 0, which
    their masked loads never touch. A row of kv head `h` then starts at
    ``block * stride0 + h * stride1 + offset * stride2``."""
    block = tl.load(
        table_row + (token // block_size) * table_step, mask=mask, other=0
    ).to(tl.int64)
    return block, token % block_size


def check_paged_indices(operator, block_tables, seq_lens, cum_seq_lens_q=None) -> None:
    """Raises `operator.index_error` (through the base's `check_indices`)
    when `seq_lens`, the block table entries in use or `cum_seq_lens_q` are
    out of range; a handful of device reductions and a single synchronising
    transfer when they are not (the base's scan synchronises once per
    condition)."""
    import torch

    seqs, max_blocks = operator.seqs, operator.max_blocks
    if seqs == 0 or max_blocks == 0:
        operator.check_indices(block_tables, seq_lens, cum_seq_lens_q)
        return
    lengths = seq_lens.to(torch.int64)
    # Column `c` of a row is in use when its first token, `c * block_size`,
    # is below the sequence's length; unused columns may hold anything.
    starts = torch.arange(
        0,
        max_blocks * operator.block_size,
        operator.block_size,
        device=lengths.device,
    )
    in_use = starts[None, :] < lengths[:, None]
    blocks = torch.where(in_use, block_tables, 0).to(torch.int64)
    facts = [*torch.aminmax(lengths), *torch.aminmax(blocks)]
    if cum_seq_lens_q is not None:
        cum = cum_seq_lens_q.to(torch.int64)
        steps = cum[1:] - cum[:-1]
        facts += [cum[0], cum[-1], steps.min(), (steps - lengths).max()]
    values = torch.stack(facts).tolist()
    capacity = max_blocks * operator.block_size
    bad = (
        values[0] < 0
        or values[1] > capacity
        or values[2] < 0
        or values[3] >= operator.blocks
    )
    if cum_seq_lens_q is not None:
        first, last, step, excess = values[4:]
        bad = bad or first != 0 or last != operator.tokens or step < 0 or excess > 0
    if bad:
        operator.check_indices(block_tables, seq_lens, cum_seq_lens_q)
        # The scan and the reductions test the same conditions; this is only
        # reached if they ever disagree, and must still refuse to run.
        raise operator.error(
            "`block_tables`, `seq_lens` or `cum_seq_lens_q` holds a value out "
            "of range; nothing was written."
        )


def launch_or_stage(operator, launch, stream, out, inputs, tensors) -> None:
    """Runs `launch(stream, out, *tensors)`, through a staging buffer when
    `operator.overlap` says `out` overlaps one of `inputs` other than element
    for element."""
    if operator.overlap(out, inputs):
        with stream_context(operator.device, stream):
            staging = staging_like(out)
            launch(stream, staging, *tensors)
            out.copy_(staging)
        return
    launch(stream, out, *tensors)
