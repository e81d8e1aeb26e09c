import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, KV_HEADS, Case, nbytes
from benchmarks.ops.reshape_and_cache import BLOCK_SIZE, cache_inputs


def cases(tokens, dtype):
    blocks, key, value, slot_mapping = cache_inputs(tokens, dtype)
    key_cache = torch.zeros(blocks, BLOCK_SIZE, KV_HEADS, HEAD_SIZE, dtype=dtype)
    value_cache = torch.zeros_like(key_cache)
    scale = torch.ones(1)
    # The NHD layout makes a slot one row of (blocks * block size) rows.
    key_rows = key_cache.view(-1, KV_HEADS, HEAD_SIZE)
    value_rows = value_cache.view(-1, KV_HEADS, HEAD_SIZE)

    def eager():
        key_rows.index_copy_(0, slot_mapping, key)
        value_rows.index_copy_(0, slot_mapping, value)

    yield Case(
        f"({tokens}, {KV_HEADS}, {HEAD_SIZE}) x2",
        lambda: infini.ops.reshape_and_cache_flash(
            key, value, slot_mapping, scale, scale, "auto", key_cache, value_cache
        ),
        eager,
        2 * nbytes(key, value) + nbytes(slot_mapping),
        key.numel(),
    )
