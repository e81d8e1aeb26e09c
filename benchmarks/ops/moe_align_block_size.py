import torch

import infini.ops
from benchmarks.harness import Case, nbytes

# Compute-bound: GB/s is reported, not held to the copy bandwidth.
MEMORY_BOUND = False

EXPERTS, TOPK, BLOCK = 64, 8, 64


def _torch_align(topk_ids, sorted_ids, expert_ids, total):
    """vLLM's alignment in torch eager ops (a stable sort by expert)."""
    flat = topk_ids.flatten().long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=EXPERTS)
    padded = (counts + BLOCK - 1) // BLOCK * BLOCK
    starts = torch.cumsum(padded, 0) - padded
    firsts = torch.cumsum(counts, 0) - counts
    experts = flat[order]
    places = starts[experts] + torch.arange(flat.numel()) - firsts[experts]
    sorted_ids.fill_(flat.numel())
    sorted_ids[places] = order.to(sorted_ids.dtype)
    expert_ids.zero_()
    blocks = torch.repeat_interleave(torch.arange(EXPERTS), padded // BLOCK)
    expert_ids[: blocks.numel()] = blocks.to(expert_ids.dtype)
    total.fill_(int(padded.sum()))


def cases(tokens, dtype):
    if dtype != torch.float32:  # integer operator: one dtype is enough
        return
    topk_ids = torch.stack([torch.randperm(EXPERTS)[:TOPK] for _ in range(tokens)])
    topk_ids = topk_ids.to(torch.int32)
    length = topk_ids.numel() + EXPERTS * (BLOCK - 1)
    sorted_ids = torch.empty(length, dtype=torch.int32)
    expert_ids = torch.empty(-(-length // BLOCK), dtype=torch.int32)
    total = torch.empty(1, dtype=torch.int32)
    yield Case(
        f"({tokens}, {TOPK}) of {EXPERTS}, block {BLOCK}",
        lambda: infini.ops.moe_align_block_size(
            topk_ids, None, EXPERTS, BLOCK, sorted_ids, expert_ids, total
        ),
        lambda: _torch_align(topk_ids, sorted_ids, expert_ids, total),
        nbytes(topk_ids, sorted_ids, expert_ids),
        topk_ids.numel(),
    )
