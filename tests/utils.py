"""Tensor helpers and the `Payload` protocol of `auto_act_and_assert` tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Payload:
    """What an `auto_act_and_assert` test returns: the harness calls
    `func(*args, **kwargs)` and `ref` on deep copies of the arguments, and
    compares what they return."""

    func: object
    ref: object
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-8


def _storage_size(shape, strides) -> int:
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def _strided(fill, shape, strides, dtype, device):
    shape = tuple(shape)
    strides = _contiguous_strides(shape) if strides is None else tuple(strides)
    size = _storage_size(shape, strides)
    # Fill the whole storage span through a flat view, so that gaps between
    # elements hold data too (a kernel reading them would be caught).
    flat = fill(max(size, 0), dtype, device)
    return torch.as_strided(flat, shape, strides)


def empty_strided(shape, strides=None, *, dtype=torch.float32, device="cpu"):
    return _strided(
        lambda n, d, dev: torch.empty(n, dtype=d, device=dev),
        shape,
        strides,
        dtype,
        device,
    )


def randn_strided(shape, strides=None, *, dtype=torch.float32, device="cpu"):
    return _strided(
        lambda n, d, dev: torch.randn(n, dtype=d, device=dev),
        shape,
        strides,
        dtype,
        device,
    )


def rand_strided(shape, strides=None, *, dtype=torch.float32, device="cpu"):
    return _strided(
        lambda n, d, dev: torch.rand(n, dtype=d, device=dev),
        shape,
        strides,
        dtype,
        device,
    )


def randint_strided(low, high, shape, strides=None, *, dtype=torch.int64, device="cpu"):
    def fill(n, d, dev):
        try:
            return torch.randint(low, high, (n,), dtype=d, device=dev)
        except (RuntimeError, TypeError):
            return torch.randint(low, high, (n,), dtype=torch.int64, device=dev).to(d)

    return _strided(fill, shape, strides, dtype, device)


def clone_strided(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with the same strides and the whole storage span it reaches."""
    size = _storage_size(tensor.shape, tensor.stride())
    base = torch.as_strided(tensor, (size,), (1,)) if size else tensor.new_empty(0)
    return torch.as_strided(base.clone(), tensor.shape, tensor.stride())


def clone_arguments(value):
    if isinstance(value, torch.Tensor):
        return clone_strided(value)
    if isinstance(value, tuple):
        return tuple(clone_arguments(v) for v in value)
    if isinstance(value, list):
        return [clone_arguments(v) for v in value]
    if isinstance(value, dict):
        return {k: clone_arguments(v) for k, v in value.items()}
    return value


def get_stream(device) -> int:
    """The raw handle of the current stream on accelerators, 0 on the CPU."""
    kind = torch.device(device).type
    if kind == "cpu":
        return 0
    module = getattr(torch, kind)
    stream = module.current_stream()
    return getattr(stream, f"{kind}_stream", getattr(stream, "cuda_stream", 0))


def assert_close(output, expected, rtol, atol) -> None:
    if isinstance(expected, (tuple, list)):
        assert isinstance(output, (tuple, list)) and len(output) == len(expected)
        for o, e in zip(output, expected):
            assert_close(o, e, rtol, atol)
        return
    assert isinstance(output, torch.Tensor), f"expected a tensor, got {type(output)}"
    assert output.shape == expected.shape, f"shape {output.shape} != {expected.shape}"
    if output.is_floating_point() or expected.is_floating_point():
        expected = (
            expected.to(output.dtype) if expected.dtype != output.dtype else expected
        )
        close = torch.isclose(output, expected, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()):
            bad = (~close).nonzero()[:5].tolist()
            worst = (
                (output.double() - expected.double())
                .abs()
                .nan_to_num(float("inf"))
                .max()
            )
            raise AssertionError(
                f"{int((~close).sum())} of {output.numel()} elements differ "
                f"(rtol={rtol}, atol={atol}); max abs diff {float(worst):.3g}; "
                f"first at {bad}"
            )
    else:
        assert torch.equal(output, expected.to(output.dtype)), "outputs differ"
