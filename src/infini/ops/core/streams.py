"""Running framework work on the caller's stream.

Every public call takes a raw `stream` handle: 0 means the current stream,
anything else is the handle the caller wants the work queued on. Kernels
receive the handle directly; torch work that an implementation queues itself
(ATen calls, staging copies, scratch allocations) runs inside
`stream_context(device, stream)`, which wraps the handle as torch's external
stream for that block.

Only the standard library is imported here; torch is imported the first
time a non-zero stream of an accelerator needs wrapping.
"""

from __future__ import annotations

from contextlib import nullcontext

from .devices import TORCH_DEVICE_TYPE_OF_PLATFORM, TRITON_INTERPRETER

# `(device, stream)` -> `(torch device module, its ExternalStream)`: wrapping a
# handle once keeps repeated calls on the same stream cheap.
_EXTERNAL_STREAMS: dict = {}

_NO_STREAM = nullcontext()


def stream_context(device, stream: int):
    """A context manager that runs torch work on the raw `stream` handle of
    `device` (an InfiniOps `Device`).

    Nothing is switched for stream 0 (the current stream), on the CPU, or in
    the Triton interpreter test mode, where CPU tensors stand in for the
    CUDA-like device.
    """
    if not stream or device.platform == "cpu" or TRITON_INTERPRETER:
        return _NO_STREAM
    key = (device, stream)
    wrapped = _EXTERNAL_STREAMS.get(key)
    if wrapped is None:
        import torch

        device_type = TORCH_DEVICE_TYPE_OF_PLATFORM[device.platform]
        module = getattr(torch, device_type)
        external = module.ExternalStream(stream, device=f"{device_type}:{device.index}")
        wrapped = _EXTERNAL_STREAMS[key] = (module, external)
    module, external = wrapped
    return module.stream(external)
