"""A paged KV cache: fixed-size blocks handed out to sequences on demand."""

from __future__ import annotations

import torch


class PagedKVCache:
    """Key and value blocks of every layer, in the layout of
    `paged_attention_infinilm`: ``(layers, blocks, kv_heads, block_size,
    head_dim)``, on `device`. `layer_caches(i)` gives the two views one
    layer reads.

    Blocks are allocated to sequences by `allocate` and returned by `free`;
    a sequence's block list maps its token ``j`` to slot
    ``blocks[j // block_size] * block_size + j % block_size``. The block
    bookkeeping is host-side Python; only the caches live on the device.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        num_kv_heads: int,
        block_size: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (num_layers, num_blocks, num_kv_heads, block_size, head_dim)
        self.key = torch.zeros(shape, dtype=dtype, device=device)
        self.value = torch.zeros(shape, dtype=dtype, device=device)
        # One view per layer, made once: indexing a tensor costs microseconds
        # on every call.
        self._layers = [(self.key[i], self.value[i]) for i in range(num_layers)]
        self.block_size = block_size
        self.num_blocks = num_blocks
        # Lowest blocks first, so a short run touches little memory.
        self._free = list(range(num_blocks - 1, -1, -1))

    def layer_caches(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._layers[layer]

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(self, blocks: list[int], tokens: int) -> bool:
        """Grows `blocks` (a sequence's block list) to hold `tokens` tokens;
        returns False, changing nothing, when too few blocks are free."""
        needed = self.blocks_for(tokens) - len(blocks)
        if needed <= 0:
            return True
        if needed > len(self._free):
            return False
        for _ in range(needed):
            blocks.append(self._free.pop())
        return True

    def free(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))
        blocks.clear()

    def slot(self, blocks: list[int], position: int) -> int:
        block, offset = divmod(position, self.block_size)
        return blocks[block] * self.block_size + offset
