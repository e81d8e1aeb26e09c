"""Reading `ops.json` operator selections and the slots of implementation modules.

An `ops.json` file maps operator names to the implementations a build keeps
(docs/behaviour.md, "ops.json")::

    {
      "add": {"implementations": "all"},
      "gemm": {"implementations": [0, 2]},
      "relu": "src/infini/ops/native/cpu/ops/relu.py",
      "rms_norm": ["src/infini/ops/native/cpu/ops/rms_norm.py",
                   {"path": "src/infini/ops/torch/ops/rms_norm.py",
                    "backend": "torch"}]
    }

`load_ops_config` validates a file and returns the normalised form
``{op: {"headers": [...] | None, "implementations": tuple | None}}``.
"Headers" keeps the original's word: here they are implementation modules, given
relative to the source root, as strings or ``{"path", "backend"}`` descriptors.

This module is imported by the other generators and by the tests; like
them it uses only the standard library and `infini.ops.core` (through
`build_model`), because it runs inside pip's isolated build environment.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from build_model import (
    BACKENDS,
    GENERATED_ATEN_SLOT,
    MAX_IMPLEMENTATIONS,
    PLATFORM_SETS,
)

_DESCRIPTOR_KEYS = ("path", "backend")
_OBJECT_KEYS = ("implementations",)
_GENERATED_DIRECTORIES = ("generated", "_generated")


class OpsConfigError(ValueError):
    """An invalid operator selection; the message names the file and the entry."""


class ImplementationDeclaration(NamedTuple):
    """One ``@implementation(...)`` decorator found in a module's source."""

    class_name: str
    operator: str
    devices: tuple[str, ...] | str
    slot: int
    line: int


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            # `json` turns this `ValueError` into the "failed to read" message
            # below, like any other malformed input.
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _read_json_strictly(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as file:
            return json.load(file, object_pairs_hook=_reject_duplicate_keys)
    except (OSError, ValueError) as error:
        raise OpsConfigError(f"failed to read {path}: {error}") from error


def _is_blank(value: object) -> bool:
    return not isinstance(value, str) or not value.strip()


def is_generated_path(path: str) -> bool:
    """Whether `path` lies under a `generated/` or `_generated/` directory."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    return any(part in _GENERATED_DIRECTORIES for part in parts[:-1])


def _check_not_generated(config_path: Path, op: str, path: str) -> None:
    # Generated modules are rewritten by every configure, so a selection that
    # names one would silently change meaning; slots say the same thing stably.
    if is_generated_path(path):
        raise OpsConfigError(
            f"{config_path}: {op!r} implementation path {path!r} is under "
            "generated/: generated files are not supported; select slots instead"
        )


def _normalise_paths(config_path: Path, op: str, value: list[Any]) -> list[Any]:
    if not value:
        raise OpsConfigError(
            f"{config_path}: {op!r} implementation paths must be a non-empty array"
        )
    headers: list[Any] = []
    seen_paths: set[str] = set()
    for entry in value:
        if isinstance(entry, str):
            if not entry.strip():
                raise OpsConfigError(
                    f"{config_path}: {op!r} implementation path must not be empty"
                )
            path = entry
            headers.append(entry)
        elif isinstance(entry, dict):
            unknown = sorted(set(entry) - set(_DESCRIPTOR_KEYS))
            if unknown:
                raise OpsConfigError(
                    f"{config_path}: {op!r} implementation descriptor contains "
                    f"unknown keys: {', '.join(unknown)}"
                )
            for key in _DESCRIPTOR_KEYS:
                if _is_blank(entry.get(key)):
                    raise OpsConfigError(
                        f"{config_path}: {op!r} implementation descriptor requires "
                        f"a non-empty string {key!r}"
                    )
            path = entry["path"]
            headers.append({"path": path, "backend": entry["backend"]})
        else:
            raise OpsConfigError(
                f"{config_path}: {op!r} implementation entries must be paths or "
                "structured descriptors"
            )
        _check_not_generated(config_path, op, path)
        # The same module listed twice (even with two backend names) would
        # register its classes twice.
        if path in seen_paths:
            raise OpsConfigError(
                f"{config_path}: {op!r} implementation paths contain duplicates"
            )
        seen_paths.add(path)
    return headers


def _normalise_slots(
    config_path: Path, op: str, value: Mapping[str, Any]
) -> tuple[int, ...] | None:
    unknown = sorted(set(value) - set(_OBJECT_KEYS))
    if unknown:
        raise OpsConfigError(
            f"{config_path}: {op!r} contains unknown keys: {', '.join(unknown)}"
        )
    if "implementations" not in value:
        raise OpsConfigError(
            f"{config_path}: {op!r} is missing required key 'implementations'"
        )
    slots = value["implementations"]
    if slots == "all":
        return None
    if not isinstance(slots, list):
        raise OpsConfigError(
            f"{config_path}: {op!r} implementations must be 'all' or an array"
        )
    if not slots:
        raise OpsConfigError(f"{config_path}: {op!r} implementations must not be empty")
    for slot in slots:
        # `type(...) is int` rather than `isinstance`, so `true` is not slot 1.
        if type(slot) is not int or not 0 <= slot < MAX_IMPLEMENTATIONS:
            raise OpsConfigError(
                f"{config_path}: {op!r} implementations must contain integers "
                f"between 0 and {MAX_IMPLEMENTATIONS - 1}"
            )
    if len(set(slots)) != len(slots):
        raise OpsConfigError(
            f"{config_path}: {op!r} implementations contain duplicates"
        )
    return tuple(slots)


def load_ops_config(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read and validate an operator selection file (docs/behaviour.md, "ops.json").

    Returns ``{op: {"headers": list | None, "implementations": tuple | None}}``:
    ``headers`` lists the explicit implementation modules (strings or
    ``{"path", "backend"}`` dicts), ``implementations`` the selected slots;
    both `None` means every available slot. Raises `OpsConfigError`.
    """
    config_path = Path(path)
    data = _read_json_strictly(config_path)
    if not isinstance(data, dict):
        raise OpsConfigError(f"{config_path} must contain a JSON object")

    config: dict[str, dict[str, Any]] = {}
    for op, value in data.items():
        if not isinstance(op, str) or not op:
            raise OpsConfigError(
                f"{config_path}: operator names must be non-empty strings"
            )
        if op != op.strip():
            raise OpsConfigError(
                f"{config_path}: operator name {op!r} contains surrounding whitespace"
            )
        if isinstance(value, str):
            if not value.strip():
                raise OpsConfigError(
                    f"{config_path}: {op!r} implementation path must not be empty"
                )
            _check_not_generated(config_path, op, value)
            config[op] = {"headers": [value], "implementations": None}
        elif isinstance(value, list):
            headers = _normalise_paths(config_path, op, value)
            config[op] = {"headers": headers, "implementations": None}
        elif isinstance(value, dict):
            slots = _normalise_slots(config_path, op, value)
            config[op] = {"headers": None, "implementations": slots}
        else:
            raise OpsConfigError(
                f"{config_path}: {op!r} must map to implementation path(s) or an object"
            )
    return config


def header_path(header: str | Mapping[str, str]) -> str:
    """The module path of a normalised "headers" entry."""
    return header if isinstance(header, str) else header["path"]


def infer_backend(path: str) -> str:
    """The backend of an implementation module, from its directory.

    The top directory under `infini/ops/` names it (`native`, `torch`,
    `triton`, `ninetoothed`, `linked`); a path with none of these is native,
    as in the original.
    """
    parts = PurePosixPath(path.replace("\\", "/")).parts
    for index in range(len(parts) - 2):
        if parts[index : index + 2] == ("infini", "ops"):
            top = parts[index + 2]
            return top if top in BACKENDS else "native"
    for backend in BACKENDS:
        if backend != "native" and backend in parts[:-1]:
            return backend
    return "native"


# What `_literal` returns for an argument that is not a literal (a name, a
# call): no valid value compares equal to it, so the type checks reject it.
_NOT_LITERAL = object()


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return _NOT_LITERAL


def _is_implementation_decorator(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if isinstance(function, ast.Name):
        return function.id == "implementation"
    return isinstance(function, ast.Attribute) and function.attr == "implementation"


def read_implementations(
    path: str | Path, source: str | None = None
) -> list[ImplementationDeclaration]:
    """Every ``@implementation(...)`` class of a module, read with `ast`.

    The module is not imported: the build must not need the kernels'
    dependencies. Raises `OpsConfigError` naming the file and the class when a
    decorator argument is not a literal of the expected type.
    """
    path = Path(path)
    if source is None:
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as error:
            raise OpsConfigError(f"failed to read {path}: {error}") from error
    if "implementation" not in source:
        return []
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as error:
        raise OpsConfigError(f"failed to read {path}: {error}") from error

    declarations = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            if _is_implementation_decorator(decorator):
                declarations.append(_read_decorator(path, node, decorator))
    declarations.sort(key=lambda declaration: declaration.line)
    return declarations


def _read_decorator(
    path: Path, node: ast.ClassDef, decorator: ast.Call
) -> ImplementationDeclaration:
    where = f"{path}: `{node.name}`"
    if decorator.args:
        raise OpsConfigError(
            f"{where}: @implementation takes keyword arguments only "
            "(operator=, devices=, slot=)"
        )
    arguments = {keyword.arg: _literal(keyword.value) for keyword in decorator.keywords}
    unknown = sorted(
        str(name) for name in set(arguments) - {"operator", "devices", "slot"}
    )
    if unknown:
        raise OpsConfigError(
            f"{where}: @implementation has unknown arguments: {', '.join(unknown)}"
        )
    operator = arguments.get("operator")
    if _is_blank(operator):
        raise OpsConfigError(
            f"{where}: @implementation needs a literal non-empty string `operator`"
        )
    devices = arguments.get("devices")
    if devices in PLATFORM_SETS:
        devices = PLATFORM_SETS[devices]
    elif devices != "all":
        if (
            not isinstance(devices, (tuple, list))
            or not devices
            or any(_is_blank(device) for device in devices)
        ):
            raise OpsConfigError(
                f'{where}: @implementation `devices` must be "all", a platform set '
                f"({', '.join(repr(name) for name in PLATFORM_SETS)}) or a literal "
                "non-empty tuple of platform names"
            )
        devices = tuple(devices)
    # A missing slot is slot 0, as a missing `N` in `Operator<A, B, N>` is.
    slot = arguments.get("slot", 0)
    if type(slot) is not int or not 0 <= slot < MAX_IMPLEMENTATIONS:
        raise OpsConfigError(
            f"{where}: @implementation `slot` must be a literal integer between 0 "
            f"and {MAX_IMPLEMENTATIONS - 1}"
        )
    return ImplementationDeclaration(node.name, operator, devices, slot, node.lineno)


def implementation_slot(path: str | Path) -> int:
    """The one implementation slot a module declares (docs/behaviour.md, "ops.json").

    The legacy path forms of `ops.json` select a module as a whole, so the
    module must bind exactly one slot (for any number of devices).
    """
    slots = sorted({declaration.slot for declaration in read_implementations(path)})
    if len(slots) != 1:
        found = ", ".join(map(str, slots)) if slots else "none"
        raise OpsConfigError(
            f"{path} must declare exactly one implementation slot; found {found}"
        )
    return slots[0]


def torch_op_names(
    config: Mapping[str, Mapping[str, Any]] | None,
    default_ops: Iterable[str],
    slot: int = GENERATED_ATEN_SLOT,
) -> list[str]:
    """The operators that get the generated ATen implementation (`slot`).

    Without a config every default (ATen-list) operator does. With one, an
    operator marked "all" does only if it is in `default_ops`; one with a slot
    list does iff `slot` is listed, even when it is not a default; header-form
    entries never do.
    """
    defaults = set(default_ops)
    if config is None:
        return sorted(defaults)
    selected = []
    for op, entry in config.items():
        if entry.get("headers") is not None:
            continue
        slots = entry.get("implementations")
        if (slots is None and op in defaults) or (slots is not None and slot in slots):
            selected.append(op)
    return sorted(selected)
