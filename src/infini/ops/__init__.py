"""InfiniOps: operators for AI inference on every device, in Python.

The public surface is built from the build manifest: for every operator of the
build, a snake_case function (``infini.ops.rms_norm(x, w, 1e-6, out)``) and a
PascalCase class (``infini.ops.RmsNorm``). Kernels are imported lazily, the
first time an operator is built for a device.
"""

from .core.dispatch import build_surface as _build_surface

__version__, _entries = _build_surface(globals())
del _build_surface


def _host_range_profile_compiled() -> bool:
    """Whether host-range profiling is built in (it is not in this edition)."""
    return False


def _host_range_profile_start() -> None:
    raise RuntimeError("host range profiling is not compiled")


def _host_range_profile_stop() -> list:
    raise RuntimeError("host range profiling is not compiled")


def _host_range_profile_calibrate(iterations: int) -> list:
    raise RuntimeError("host range profiling is not compiled")
