import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, KV_HEADS, Case, nbytes
from benchmarks.ops.reshape_and_cache import BLOCK_SIZE, cache_inputs


def cases(tokens, dtype):
    blocks, k, v, slot_mapping = cache_inputs(tokens, dtype)
    k_cache = torch.zeros(blocks, KV_HEADS, BLOCK_SIZE, HEAD_SIZE, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)

    def eager():
        block, offset = slot_mapping // BLOCK_SIZE, slot_mapping % BLOCK_SIZE
        k_cache[block, :, offset] = k
        v_cache[block, :, offset] = v

    yield Case(
        f"({tokens}, {KV_HEADS}, {HEAD_SIZE}) x2",
        lambda: infini.ops.paged_caching_infinilm(k, v, slot_mapping, k_cache, v_cache),
        eager,
        2 * nbytes(k, v) + nbytes(slot_mapping),
        k.numel(),
    )
