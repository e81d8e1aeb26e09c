"""Reference helpers shared by the MoE routing tests."""

from __future__ import annotations

import torch


def distinct_scores(tokens, experts, dtype=torch.float32, device="cpu", strides=None):
    """``(tokens, experts)`` scores without ties in any row, exact in every
    float dtype: each row is a random permutation of multiples of 1/32 (plus
    a fixed offset per row), so top-k orders are unambiguous."""
    rows = [torch.randperm(experts) for _ in range(tokens)]
    values = torch.stack(rows) if rows else torch.empty(0, experts, dtype=torch.long)
    scores = (values.to(torch.float32) - experts // 2) / 32
    if strides is None:
        return scores.to(dtype=dtype, device=device)
    storage_size = 1 + sum((n - 1) * s for n, s in zip((tokens, experts), strides))
    base = torch.randn(max(storage_size, 1), dtype=dtype, device=device)
    result = torch.as_strided(base, (tokens, experts), strides)
    result.copy_(scores)
    return result


def token_expert_indices(tokens, topk):
    """``j * tokens + t`` at ``[t, j]``."""
    return (
        torch.arange(topk).unsqueeze(0) * tokens + torch.arange(tokens).unsqueeze(1)
    ).to(torch.int64)


def topk_gating_reference(
    gating, bias, is_padding, renormalize, scale, topk, scoring, id_dtype
):
    """vLLM's top-k gating in float64: scores, selection with the bias,
    unbiased weights, renormalised, scaled; padding rows get id -1, weight 0."""
    x = gating.double()
    scores = torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)
    choice = scores if bias is None else scores + bias.double()
    ids = choice.topk(topk, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        total = weights.sum(dim=-1, keepdim=True)
        weights = weights / torch.where(total == 0, torch.ones_like(total), total)
    weights = weights * scale
    if is_padding is not None:
        padded = is_padding.bool().unsqueeze(1)
        weights = weights.masked_fill(padded, 0.0)
        ids = ids.masked_fill(padded, -1)
    return weights, ids.to(id_dtype)


def gpu_sort_tiles(monkeypatch, *, direct_limit, fill=16, pad=2):
    """Under the Triton interpreter, makes the CUDA-like counting sort
    (`native/cuda/routing.py`, `moe_align_block_size`,
    `get_cutlass_moe_mm_data`) cut a small problem as it cuts a large one on
    a GPU: chunks of 16 entries, blocks of 8 experts, the scan launch (two
    chunks a step) when the count table has more than `direct_limit`
    elements, and short fill loops. The interpreter's own tiles put every
    test case in one program. Elsewhere (the CPU kernels) it does nothing.
    Call it before the first call of a geometry: operators are cached per
    geometry."""
    from infini.ops.core.devices import TRITON_INTERPRETER

    if not TRITON_INTERPRETER:
        return
    from infini.ops.native.cuda import routing
    from infini.ops.native.cuda.ops import moe_align_block_size

    monkeypatch.setattr(routing, "INTERPRETER_SORT_TILE", 128)
    monkeypatch.setattr(routing, "INTERPRETER_EXPERT_BLOCK_LIMIT", 8)
    monkeypatch.setattr(routing, "DIRECT_TABLE_LIMIT", direct_limit)
    monkeypatch.setattr(routing, "SCAN_TILE", 16)
    monkeypatch.setattr(moe_align_block_size, "FILL_BLOCK", fill)
    monkeypatch.setattr(moe_align_block_size, "PAD_BLOCK_LIMIT", pad)
    monkeypatch.setattr(moe_align_block_size, "BLOCKS_STEP_ELEMENTS", 64)
