"""Helpers shared by the hand-written PyTorch implementations."""

from __future__ import annotations

from contextlib import nullcontext

from infini.ops.core.devices import TORCH_DEVICE_TYPE_OF_PLATFORM

_STREAMS: dict = {}


def stream_context(stream: int, device):
    """Runs a block on the caller's raw `stream` handle (contract 1.7):
    ``torch.<device>.stream(ExternalStream(stream))``; nothing on the CPU or
    for stream 0 (the current stream)."""
    if not stream or device.platform == "cpu":
        return nullcontext()
    import torch

    device_type = TORCH_DEVICE_TYPE_OF_PLATFORM[device.platform]
    key = (device_type, stream)
    context = _STREAMS.get(key)
    if context is None:
        module = getattr(torch, device_type)
        context = _STREAMS[key] = (module, module.ExternalStream(stream))
    module, external = context
    return module.stream(external)


def shares_memory(output, *inputs) -> bool:
    """Whether `output` shares storage with any of `inputs` (then the result
    is computed aside and copied, so inputs are read first)."""
    storage = output.untyped_storage().data_ptr()
    return any(
        item is not None and item.untyped_storage().data_ptr() == storage
        for item in inputs
    )
