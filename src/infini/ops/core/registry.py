"""Registration of implementations.

An implementation declares itself where it is defined::

    @implementation(operator="add", devices=("cpu",), slot=0)
    class CpuAdd(Add): ...

The build scripts find these decorators by reading the source (the arguments
must be literals), so no central list is kept by hand; at run time the
decorator records the binding on the class and in `IMPLEMENTATIONS`.
"""

from __future__ import annotations

from .devices import PLATFORM_SETS

# (operator, slot) -> {platform or "all": class}
IMPLEMENTATIONS: dict[tuple[str, int], dict[str, type]] = {}

MAX_IMPLEMENTATIONS = 32


def implementation(*, operator: str, devices: tuple[str, ...] | str, slot: int):
    if not 0 <= slot < MAX_IMPLEMENTATIONS:
        raise ValueError(f"implementation slot {slot} of `{operator}` is not in 0..31")
    if devices == "all":
        platforms = ("all",)
    else:
        platforms = PLATFORM_SETS.get(devices) or tuple(devices)

    def register(cls: type) -> type:
        cls.implementation_slot = slot
        cls.implementation_devices = platforms
        table = IMPLEMENTATIONS.setdefault((operator, slot), {})
        for platform in platforms:
            table[platform] = cls
        return cls

    return register
