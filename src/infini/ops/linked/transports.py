"""Calling linked providers at run time.

The configure step resolved every linked binding of the build to one library
file and recorded both in the manifest's `linked` section. Two transports
reach a library:

- `dispatcher_operator`: the library registers torch dispatcher operators
  (`TORCH_LIBRARY`); it is loaded once, on the first call of any of its
  bindings, with `torch.ops.load_library`, and the binding calls
  `torch.ops.<namespace>.<name>` on the caller's tensors.
- `c_function`: the library exports plain C functions; it is opened once
  with `ctypes` and the binding passes data pointers.
- `extension_function`: the library is a pybind11 extension module whose
  contract lists C++ symbols (flash-attn, apex); it is imported once and the
  binding calls the module's Python function for those symbols.

A library that registers dispatcher operators is never loaded when its
operators already exist in the process (for example after `import vllm`):
a second build of the same `TORCH_LIBRARY` aborts the process.
"""

from __future__ import annotations

import threading
from functools import cache

from infini.ops.core.errors import OperatorError
from infini.ops.core.manifest import load_manifest

_LOCK = threading.Lock()


@cache
def binding_of(module: str, device: str) -> dict:
    """The manifest record of the binding that `module` adapts on `device`."""
    for binding in load_manifest().get("linked", {}).get("bindings", ()):
        if binding["module"] == module and binding["device"] == device:
            return binding
    raise ImportError(
        f"the build manifest resolves no linked binding for {module} on {device}; "
        "configure with `WITH_LINKED=ON` and the provider installed"
    )


@cache
def library_of(binding_module: str, device: str) -> dict:
    binding = binding_of(binding_module, device)
    for library in load_manifest()["linked"]["libraries"]:
        if (
            library["name"] == binding["library"]
            and library["device"] == device
            and library["transport"] == binding["transport"]
        ):
            return library
    raise ImportError(f"the build manifest has no library for {binding['contract']}")


def _registered(qualified_name: str) -> bool:
    import torch

    namespace, _, name = qualified_name.partition("::")
    name = name.partition(".")[0]
    try:
        getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def dispatcher_operator(module: str, device: str, qualified_name: str | None = None):
    """The `torch.ops` overload a dispatcher binding calls, loading its
    library on first use.

    A binding with an `operator_schema` names its operator; one with
    `required_symbols` (C++ functions taking `at::Tensor`, which `ctypes`
    cannot call) passes `qualified_name`, the operator under which the same
    library registers those functions with the dispatcher. A binding whose
    contracted operator needs a helper operator of the same library (vLLM's
    CPU attention takes the plan `_C::get_scheduler_metadata` makes) passes
    that one's `qualified_name` too: it is then looked up in the binding's
    library, and an `ImportError` names it when the library lacks it."""
    import torch

    binding = binding_of(module, device)
    if qualified_name:
        qualified = qualified_name
    elif "operator_schema" in binding:
        qualified = binding["operator_schema"].partition("(")[0]
    else:
        raise ImportError(
            f"{binding['contract']} has no `operator_schema`: the adapter must name "
            "the dispatcher operator that calls its symbols"
        )
    name, _, overload = qualified.partition(".")
    with _LOCK:
        if not _registered(name):
            torch.ops.load_library(library_of(module, device)["path"])
    if not _registered(name):
        raise ImportError(
            f"{library_of(module, device)['path']} registers no `{name}` "
            f"(needed by {binding['contract']})"
        )
    namespace, _, op = name.partition("::")
    packet = getattr(getattr(torch.ops, namespace), op)
    return getattr(packet, overload or "default")


@cache
def _c_library(path: str):
    import ctypes

    return ctypes.CDLL(path)


def c_function(module: str, device: str, symbol: str, argument_types, result=None):
    """A `ctypes` function of the library a C-symbol binding names; `symbol`
    must be one of the binding's `required_symbols`, which the configure step
    found exported."""
    binding = binding_of(module, device)
    if symbol not in binding.get("required_symbols", ()):
        raise ImportError(
            f"{binding['contract']} does not list `{symbol}` in `required_symbols`"
        )
    with _LOCK:
        library = _c_library(library_of(module, device)["path"])
    function = getattr(library, symbol)
    function.argtypes = list(argument_types)
    function.restype = result
    return function


def unsupported(operator: str, provider: str, message: str) -> OperatorError:
    """The `ValueError` for arguments a provider cannot take (raised while the
    operator is built, before anything is written)."""
    return OperatorError(operator, f"the linked provider `{provider}` {message}")


@cache
def _extension_module(path: str):
    import importlib.machinery
    import importlib.util
    import sys

    name = path.rpartition("/")[2].partition(".")[0]
    if name in sys.modules:
        # The provider's own package imported it already: one copy only.
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def extension_function(module: str, device: str, name: str):
    """A function of the Python extension module a `torch` binding with
    `required_symbols` resolved to (flash-attn's `flash_attn_2_cuda`, apex's
    `fused_layer_norm_cuda`): such libraries export C++ functions taking
    `at::Tensor`, which `ctypes` cannot call, and register no dispatcher
    operator, but their pybind11 module exposes the same functions to Python
    under `name`. The module is imported once, from the resolved path."""
    binding = binding_of(module, device)
    with _LOCK:
        extension = _extension_module(library_of(module, device)["path"])
    function = getattr(extension, name, None)
    if function is None:
        raise ImportError(
            f"{library_of(module, device)['path']} has no `{name}` "
            f"(needed by {binding['contract']})"
        )
    return function
