"""Registration of implementations.

An implementation declares itself where it is defined::

    @implementation(operator="add", devices=("cpu",), slot=0)
    class CpuAdd(Add): ...

The build scripts find these decorators by reading the source (the arguments
must be literals), so no central list is kept by hand; at run time the
decorator records the slot and the platforms on the class.
"""

from __future__ import annotations

from .devices import PLATFORM_SETS
from .schema import MAX_IMPLEMENTATIONS


def implementation(*, operator: str, devices: tuple[str, ...] | str, slot: int):
    if not 0 <= slot < MAX_IMPLEMENTATIONS:
        raise ValueError(
            f"implementation slot {slot} of `{operator}` is not in "
            f"0..{MAX_IMPLEMENTATIONS - 1}"
        )
    if devices == "all":
        platforms = ("all",)
    else:
        platforms = PLATFORM_SETS.get(devices) or tuple(devices)

    def register(cls: type) -> type:
        cls.implementation_slot = slot
        cls.implementation_devices = platforms
        return cls

    return register
