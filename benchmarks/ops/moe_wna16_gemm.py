import torch

import infini.ops
from benchmarks.harness import Case

# A Qwen-MoE-sized expert layer (hidden 2048, gate and up projections of
# 1408 each, top-4 routing, 4-bit weights in groups of 128), 16 experts.
EXPERTS = 16
HIDDEN = 2048
WIDTH = 2 * 1408
TOP_K = 4
GROUP = 128
BLOCK_M = 16
MAX_TOKENS = 512


def _align(topk_ids):
    numel = topk_ids.numel()
    places = numel + EXPERTS * (BLOCK_M - 1)
    sorted_ids = torch.empty(places, dtype=torch.int32)
    expert_ids = torch.empty(places // BLOCK_M, dtype=torch.int32)
    post_pad = torch.empty(1, dtype=torch.int32)
    infini.ops.moe_align_block_size(
        topk_ids, None, EXPERTS, BLOCK_M, sorted_ids, expert_ids, post_pad
    )
    return sorted_ids, expert_ids, post_pad


def cases(tokens, dtype):
    if tokens > MAX_TOKENS or dtype == torch.float32:
        return
    input = torch.randn(tokens, HIDDEN).to(dtype)
    codes = torch.randint(0, 256, (EXPERTS, WIDTH, HIDDEN // 2), dtype=torch.uint8)
    scales = (torch.rand(EXPERTS, WIDTH, HIDDEN // GROUP) / 16).to(dtype)
    topk_ids = torch.stack(
        [torch.randperm(EXPERTS)[:TOP_K] for _ in range(tokens)]
    ).int()
    topk_weights = torch.rand(tokens, TOP_K)
    sorted_ids, expert_ids, post_pad = _align(topk_ids)
    output = torch.empty(tokens, TOP_K, WIDTH, dtype=dtype)

    def ours():
        infini.ops.moe_wna16_gemm(
            input, codes, scales, None, topk_weights, sorted_ids, expert_ids,
            post_pad, TOP_K, BLOCK_M, 64, GROUP, 4, output,
        )  # fmt: skip

    flat = topk_ids.flatten().long()

    def reference():
        # Eager PyTorch: unpack and dequantise each routed expert, then one
        # product per expert over its tokens.
        result = output.view(tokens * TOP_K, WIDTH)
        result.zero_()
        for expert in flat.unique().tolist():
            entries = (flat == expert).nonzero().flatten()
            packed = codes[expert]
            unpacked = torch.stack((packed & 15, packed >> 4), -1).flatten(1)
            weight = (unpacked.to(dtype) - 8) * scales[expert].repeat_interleave(
                GROUP, 1
            )
            product = input[entries // TOP_K] @ weight.t()
            result[entries] = product * topk_weights.flatten()[entries, None].to(dtype)
        return result

    yield Case(
        f"({tokens}, {HIDDEN}) x {EXPERTS} x ({WIDTH}, {HIDDEN}) int4 top-{TOP_K}",
        ours,
        reference,
        codes[0].numel() * len(flat.unique()),
        codes.numel(),
    )
