"""A model's streamed weights in transparent huge pages (the CPU path).

A decode step reads every weight matrix once, about 100 MB for a 4-bit
SmolLM2. In 4 KiB pages that is a TLB miss (and a page walk) every 4 KiB of
a stream that the products otherwise read at the memory's speed; in 2 MiB
pages it is one per 2 MiB. Linux backs an anonymous mapping with 2 MiB pages
when it is advised so (``madvise(MADV_HUGEPAGE)``) and transparent huge
pages are in ``madvise`` or ``always`` mode, but torch's allocator gives
each tensor memory of its own, and most weights (a layer's projections) are
under 2 MiB.

`move_to_huge_pages` therefore copies the tensors into one mapping, aligned
to 2 MiB and advised so, and points each tensor at its copy
(`torch.Tensor.set_`): every holder of the tensor object (a projection, a
layer, a tied output head) sees the move, and tensors that shared memory
still do. On a system without ``MADV_HUGEPAGE`` or with transparent huge
pages off it moves nothing. Measured on SmolLM2-135M q4 at 2 threads: the
replayed decode step about 5% faster (docs/models.md).
"""

from __future__ import annotations

import mmap
from pathlib import Path

import torch

# The huge page size, to which the mapping is aligned.
HUGE_PAGE = 2 << 20
# Each storage starts on a cache line in the mapping.
ALIGNMENT = 64

_THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_available() -> bool:
    """Whether an advised mapping can get transparent huge pages here."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        mode = _THP_MODE.read_text()
    except OSError:
        return False
    return "[never]" not in mode


def move_to_huge_pages(tensors) -> int:
    """Moves the CPU `tensors` (any number of views of any storages) into
    one huge-page mapping; returns the bytes moved (0 where huge pages are
    not available). The caller must not hold addresses of the tensors taken
    before (a recorded call, a bound launch): their memory is freed once no
    tensor uses it."""
    if not huge_pages_available():
        return 0
    storages: dict[int, tuple[torch.UntypedStorage, list[torch.Tensor]]] = {}
    seen = set()
    for tensor in tensors:
        if tensor is None or id(tensor) in seen or tensor.device.type != "cpu":
            continue
        seen.add(id(tensor))
        storage = tensor.untyped_storage()
        storages.setdefault(storage.data_ptr(), (storage, []))[1].append(tensor)
    if not storages:
        return 0
    offsets, total = [], 0
    for storage, _ in storages.values():
        offsets.append(total)
        total += -(-storage.nbytes() // ALIGNMENT) * ALIGNMENT
    # Private: shared anonymous memory is shmem, which has its own THP mode.
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    mapping = mmap.mmap(-1, total + HUGE_PAGE, flags=flags)
    mapping.madvise(mmap.MADV_HUGEPAGE)
    memory = torch.frombuffer(mapping, dtype=torch.uint8)
    start = -memory.data_ptr() % HUGE_PAGE
    arena = memory[start : start + total]
    arena_storage = arena.untyped_storage()
    for offset, (storage, views) in zip(offsets, storages.values(), strict=True):
        source = torch.empty(0, dtype=torch.uint8).set_(storage)
        arena[offset : offset + storage.nbytes()].copy_(source)
        for view in views:
            elements = (start + offset) // view.element_size()
            view.set_(
                arena_storage,
                elements + view.storage_offset(),
                view.shape,
                view.stride(),
            )
    return total
