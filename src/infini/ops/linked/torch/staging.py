"""Staging for providers that take only packed tensors of one dtype.

Dispatcher kernels of other projects often read `data_ptr()` as a packed
row-major array of the input's dtype, whatever the strides (vLLM's CPU
`rms_norm` returns wrong numbers for a strided `input`). An adapter therefore
calls the provider directly only when every tensor is packed and of the
provider's dtype, and otherwise hands it packed copies (in float32 when the
dtypes differ, so results are still computed in float32 and rounded once)
and copies the results back.
"""

from __future__ import annotations


def packed(meta) -> bool:
    """Whether a tensor is row-major without gaps (what the provider reads)."""
    return meta.is_contiguous()


def overlaps(first, second) -> bool:
    """Whether two tensors' memory ranges intersect (an over-estimate for
    interleaved strided views, which only costs a staging copy)."""
    if first is None or second is None or first.numel() == 0 or second.numel() == 0:
        return False
    if first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr():
        return False

    def span(tensor):
        start = tensor.data_ptr()
        extent = sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride()))
        return start, start + (extent + 1) * tensor.element_size()

    a_start, a_end = span(first)
    b_start, b_end = span(second)
    return a_start < b_end and b_start < a_end


def staged(tensor, dtype=None):
    """A packed copy of `tensor`, in `dtype` when given."""
    import torch

    return tensor.to(
        dtype=dtype or tensor.dtype, memory_format=torch.contiguous_format
    ).contiguous()
