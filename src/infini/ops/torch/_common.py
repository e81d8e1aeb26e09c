"""Helpers shared by the hand-written PyTorch implementations."""

from __future__ import annotations


def shares_memory(output, *inputs) -> bool:
    """Whether `output` shares storage with any of `inputs` (then the result
    is computed aside and copied, so inputs are read first)."""
    storage = output.untyped_storage().data_ptr()
    return any(
        item is not None and item.untyped_storage().data_ptr() == storage
        for item in inputs
    )
