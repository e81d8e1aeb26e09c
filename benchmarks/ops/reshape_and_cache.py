import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, KV_HEADS, Case, nbytes

BLOCK_SIZE = 16


def cache_inputs(tokens, dtype):
    """Keys, values and a shuffled slot per token in a cache of twice the
    blocks the tokens need."""
    blocks = 2 * -(-tokens // BLOCK_SIZE)
    key = torch.randn(tokens, KV_HEADS, HEAD_SIZE, dtype=dtype)
    value = torch.randn(tokens, KV_HEADS, HEAD_SIZE, dtype=dtype)
    slot_mapping = torch.randperm(blocks * BLOCK_SIZE)[:tokens]
    return blocks, key, value, slot_mapping


def cases(tokens, dtype):
    blocks, key, value, slot_mapping = cache_inputs(tokens, dtype)
    # vLLM's layout: 16 bytes of a key's head per innermost vector.
    x = 16 // dtype.itemsize
    key_cache = torch.zeros(
        blocks, KV_HEADS, HEAD_SIZE // x, BLOCK_SIZE, x, dtype=dtype
    )
    value_cache = torch.zeros(blocks, KV_HEADS, HEAD_SIZE, BLOCK_SIZE, dtype=dtype)
    scale = torch.ones(1)

    def eager():
        block, offset = slot_mapping // BLOCK_SIZE, slot_mapping % BLOCK_SIZE
        key_cache[block, :, :, offset, :] = key.view(
            tokens, KV_HEADS, HEAD_SIZE // x, x
        )
        value_cache[block, :, :, offset] = value

    yield Case(
        f"({tokens}, {KV_HEADS}, {HEAD_SIZE}) x2",
        lambda: infini.ops.reshape_and_cache(
            key, value, key_cache, value_cache, slot_mapping, scale, scale, "auto"
        ),
        eager,
        2 * nbytes(key, value) + nbytes(slot_mapping),
        key.numel(),
    )
