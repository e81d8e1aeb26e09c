"""Platforms (InfiniOps device types) and their torch device names."""

from __future__ import annotations

import os
from typing import NamedTuple

# In the order of InfiniRT's `Device::Type` enum; `thead` is the T-Head PPU,
# a CUDA-like platform.
PLATFORMS = (
    "cpu",
    "nvidia",
    "cambricon",
    "ascend",
    "metax",
    "moore",
    "iluvatar",
    "hygon",
    "thead",
)

# The torch device type that tensors of each platform carry.
TORCH_DEVICE_TYPE_OF_PLATFORM = {
    "cpu": "cpu",
    "nvidia": "cuda",
    "iluvatar": "cuda",
    "metax": "cuda",
    "hygon": "cuda",
    "thead": "cuda",
    "cambricon": "mlu",
    "ascend": "npu",
    "moore": "musa",
}

# Platforms whose kernels are the shared CUDA-like (Triton) sources.
CUDA_LIKE_PLATFORMS = ("nvidia", "iluvatar", "metax", "moore", "hygon", "thead")

# Names an `@implementation(devices=...)` may give instead of a tuple.
PLATFORM_SETS = {"cuda_like": CUDA_LIKE_PLATFORMS}

# The Triton interpreter test mode (README "Testing GPU kernels on a CPU"):
# CPU tensors stand in for the build's CUDA-like device, so its Triton
# kernels run on the CPU through Triton's interpreter. `TRITON_INTERPRET` must
# be set before the kernel modules are imported (`triton.jit` reads it when it
# decorates), which importing `infini.ops` always precedes.
TRITON_INTERPRETER = os.environ.get("INFINI_OPS_TRITON_INTERPRET", "")[:1] not in (
    "",
    "0",
)
if TRITON_INTERPRETER:
    os.environ["TRITON_INTERPRET"] = "1"


class Device(NamedTuple):
    """A device of this build: its platform name and index."""

    platform: str
    index: int

    def __str__(self) -> str:
        return (
            self.platform if self.platform == "cpu" else f"{self.platform}:{self.index}"
        )


class DeviceMap:
    """Maps torch device types and platform names to the enabled platforms."""

    def __init__(self, enabled_platforms: list[str] | tuple[str, ...]) -> None:
        self.platforms = tuple(p for p in PLATFORMS if p in enabled_platforms)
        self._by_name: dict[str, str] = {}
        for platform in self.platforms:
            self._by_name[platform] = platform
            # Only one accelerator is built at a time, so a torch device type
            # names at most one enabled platform.
            self._by_name.setdefault(TORCH_DEVICE_TYPE_OF_PLATFORM[platform], platform)
        if TRITON_INTERPRETER:
            emulated = [p for p in self.platforms if p in CUDA_LIKE_PLATFORMS]
            if not emulated:
                raise ImportError(
                    "INFINI_OPS_TRITON_INTERPRET=1 runs the CUDA-like Triton kernels "
                    "on CPU tensors, but this build has no CUDA-like device "
                    f"(devices: {', '.join(self.platforms)}); build with "
                    "`WITH_NVIDIA=ON` or point `INFINI_OPS_MANIFEST` at such a "
                    "manifest."
                )
            # The CPU backend is unreachable in this mode: "cpu" names the
            # emulated device.
            self._by_name["cpu"] = emulated[0]

    def platform_of(self, name: str) -> str | None:
        """The enabled platform for a torch device type or platform name."""
        return self._by_name.get(name)

    def supported_names(self) -> list[str]:
        return sorted(self._by_name)

    def unsupported(self, name: object) -> ValueError:
        return ValueError(
            f"Unsupported device type `{name}` for this InfiniOps build. "
            f"Supported device names: {', '.join(self.supported_names())}. "
            "Rebuild InfiniOps with the matching backend enabled."
        )

    def device_of(self, torch_device) -> Device:
        """The `Device` of a torch device object (`tensor.device`)."""
        platform = self._by_name.get(torch_device.type)
        if platform is None:
            raise self.unsupported(torch_device.type)
        index = torch_device.index
        return Device(platform, 0 if index is None else index)
