"""Platforms (InfiniOps device types) and their torch device names."""

from __future__ import annotations

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
