"""Shared by the convolution tests (`conv1d`, `conv2d`, `conv3d`,
`convolution`, `conv_infinilm`): inputs, the float64 reference and the
comparison."""

from __future__ import annotations

import torch

# dtype, rtol: float32 sums in a different order than the float64
# reference; 16-bit results are the reference rounded once, give or take
# one unit in the last place where the float32 sum lands near a tie.
DTYPES = (
    (torch.float32, 1e-5),
    (torch.float64, 1e-12),
    (torch.float16, 2**-10),
    (torch.bfloat16, 2**-7),
)
DTYPE_IDS = ("float32", "float64", "float16", "bfloat16")


def random_tensor(shape, dtype, device, layout="contiguous"):
    """Random values of `dtype` in one of three layouts: packed, every
    other element of the last dimension, or with the channel dimension
    (1) stored last."""
    shape = tuple(shape)
    if layout == "strided":
        wide = shape[:-1] + (2 * shape[-1],)
        return torch.randn(wide, dtype=torch.float64).to(dtype).to(device)[..., ::2]
    if layout == "channels_last" and len(shape) >= 3:
        order = (0, *range(2, len(shape)), 1)
        stored = tuple(shape[i] for i in order)
        inverse = [order.index(i) for i in range(len(shape))]
        base = torch.randn(stored, dtype=torch.float64).to(dtype).to(device)
        return base.permute(inverse)
    return torch.randn(shape, dtype=torch.float64).to(dtype).to(device)


def empty_out(shape, dtype, device, layout="contiguous"):
    """`out` filled with NaNs (so untouched elements show), in a layout."""
    shape = tuple(shape)
    if layout == "strided":
        wide = shape[:-1] + (2 * shape[-1],)
        out = torch.full(wide, float("nan"), dtype=dtype, device=device)
        return out[..., ::2]
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def assert_matches(out, expected, dtype, rtol):
    """`out` against a float64 `expected` (16-bit results against it rounded
    once): to `rtol` of each element, which is one unit in the last place
    for 16-bit floats, plus an absolute slack scaled to the largest
    magnitude for elements that cancel towards zero (float32 sums err by
    about 1e-7 of the terms, not of the result)."""
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    got = out.cpu().double()
    if dtype in (torch.float16, torch.bfloat16):
        expected = expected.to(dtype).double()
    slack = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(got, expected, rtol=rtol, atol=slack * scale)
