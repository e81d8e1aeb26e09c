"""InfiniOps: operators for AI inference on every device, in Python.

The public surface is built from the build manifest: for every operator of the
build, a snake_case function (``infini.ops.rms_norm(x, w, 1e-6, out)``) and a
PascalCase class (``infini.ops.RmsNorm``). It is built on the first access to
one of them (or to `__version__`, `dir(infini.ops)`, ...), so importing
`infini.ops.core` or `infini.ops.base` never reads the manifest; each
function or class is made, with its signature and docstring, when its name
is first looked up. Kernels are
imported lazily too, the first time an operator is built for a device.
"""

import os as _os
import threading as _threading

_PACKAGE_DIRECTORY = _os.path.dirname(__file__)

# Names that the surface defines although they start with `_`.
_SURFACE_NAMES = frozenset(("__version__", "__all__", "_entries"))

_surface_lock = _threading.RLock()
_surface_built = False
# Public name -> what makes it (`core.dispatch.build_surface`); a name is
# made on its first lookup and then lives in the module's namespace.
_public: dict = {}


def _build_public_surface() -> None:
    """Reads the manifest and prepares every operator's function and class,
    once. Each is made on its first lookup (with its signature and
    docstring, which import the operator's base); later lookups find it in
    the module's namespace and cost nothing extra."""
    global _surface_built
    with _surface_lock:
        if _surface_built:
            return
        from .core.dispatch import build_surface

        namespace = globals()
        version, entries, public = build_surface()
        _public.update(public)
        namespace["__version__"] = version
        namespace["_entries"] = entries
        namespace["__all__"] = sorted(public)
        _surface_built = True


def _make_public(name: str):
    from .core.dispatch import make_public

    with _surface_lock:
        namespace = globals()
        if name not in namespace:
            namespace[name] = make_public(_public, name)
        return namespace[name]


def _is_submodule(name: str) -> bool:
    path = _os.path.join(_PACKAGE_DIRECTORY, name)
    return _os.path.isdir(path) or _os.path.isfile(path + ".py")


def __getattr__(name: str):
    # `from infini.ops import core` asks for the attribute before importing
    # the submodule, and tools probe private names: neither is an operator,
    # so neither builds the surface.
    if (name.startswith("_") and name not in _SURFACE_NAMES) or _is_submodule(name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "__version__":
        # The version needs the manifest only, not the operators.
        from .core.manifest import load_manifest

        version = globals()["__version__"] = load_manifest().get("package_version", "0")
        return version
    if not _surface_built:
        _build_public_surface()
        if name in globals():
            return globals()[name]
    if name in _public:
        return _make_public(name)
    # An operator that is not in this build has no function or class.
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    _build_public_surface()
    return sorted({*globals(), *_public})


def _host_range_profile_compiled() -> bool:
    """Whether host-range profiling is built in (it is not in this edition)."""
    return False


def _host_range_profile_start() -> None:
    raise RuntimeError("host range profiling is not compiled")


def _host_range_profile_stop() -> list:
    raise RuntimeError("host range profiling is not compiled")


def _host_range_profile_calibrate(iterations: int) -> list:
    raise RuntimeError("host range profiling is not compiled")
