"""Scan a source tree: its operator bases and its ``@implementation`` classes.

The bases (`src/infini/ops/base/<op>.py`) and the implementation modules under
`src/infini/ops/{native,torch,triton,ninetoothed,linked}/` are read with
`ast`, never imported, so configuring needs no kernel dependency. An
overload string is checked with the runtime's own parser
(`infini.ops.core.signature.parse_overload`).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from build_model import (
    BACKENDS,
    BASE_DIRECTORY,
    PACKAGE_DIRECTORY,
    PLATFORMS,
    Base,
    Implementation,
    ManifestError,
    class_name_of,
    parse_overload,
)
from ops_config import OpsConfigError, infer_backend, read_implementations


def module_name(source_dir: Path, path: Path) -> str:
    relative = path.resolve().relative_to((source_dir / "src").resolve())
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _relative(source_dir: Path, path: Path) -> Path:
    try:
        return path.resolve().relative_to(source_dir.resolve())
    except ValueError:
        return path


def _parse(path: Path, display: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(display))
    except (OSError, SyntaxError, ValueError) as error:
        raise ManifestError(display, f"cannot be read: {error}") from error


def class_attribute(node: ast.ClassDef, name: str) -> ast.AST | None:
    for statement in node.body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets = [statement.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return statement.value
    return None


def _literal_string(value: ast.AST | None) -> str | None:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return None


def read_base(source_dir: Path, path: Path) -> Base:
    """Read an operator base module: its one class with a literal `name`."""
    display = _relative(source_dir, path)
    tree = _parse(path, display)
    classes = [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and class_attribute(node, "name")
    ]
    if not classes:
        raise ManifestError(
            display, "defines no operator class (a class with a literal `name`)"
        )
    if len(classes) > 1:
        names = ", ".join(f"`{node.name}`" for node in classes)
        raise ManifestError(display, f"defines more than one operator class: {names}")
    node = classes[0]

    name = _literal_string(class_attribute(node, "name"))
    if not name:
        raise ManifestError(display, f"`{node.name}.name` must be a literal string")
    if name != path.stem:
        raise ManifestError(
            display,
            f"`{node.name}.name` is {name!r}; an operator base must be named "
            "after its file",
        )
    if node.name != class_name_of(name):
        raise ManifestError(
            display,
            f"the class of {name!r} must be named `{class_name_of(name)}` "
            f"(PascalCase of the name), not `{node.name}`",
        )

    trace_value = class_attribute(node, "trace_name")
    trace_name = node.name if trace_value is None else _literal_string(trace_value)
    if not trace_name:
        raise ManifestError(
            display, f"`{node.name}.trace_name` must be a literal non-empty string"
        )

    try:
        overloads = ast.literal_eval(class_attribute(node, "overloads"))
    except (ValueError, TypeError, SyntaxError):
        overloads = None
    if (
        not isinstance(overloads, (tuple, list))
        or not overloads
        or not all(isinstance(overload, str) for overload in overloads)
    ):
        raise ManifestError(
            display,
            f"`{node.name}.overloads` must be a literal non-empty tuple of strings",
        )
    for index, overload in enumerate(overloads):
        try:
            parse_overload(overload)
        except ValueError as error:
            raise ManifestError(
                display, f"`{node.name}.overloads[{index}]`: {error}"
            ) from error

    return Base(
        name=name,
        class_name=node.name,
        trace_name=trace_name,
        module=module_name(source_dir, path),
        overloads=tuple(overloads),
        docstring=ast.get_docstring(node) or ast.get_docstring(tree) or "",
        path=display,
        aten_overload_aliases=_aten_overload_aliases(node, display),
    )


def _aten_overload_aliases(node: ast.ClassDef, display: Path) -> dict[int, int]:
    """A base's ``aten_overload_aliases = {i: j}``: overload `i` calls the
    ATen schema of overload `j` after the base's `aten_arguments` hook maps
    its arguments (e.g. a legacy `reduction` string to ATen's integer)."""
    value = class_attribute(node, "aten_overload_aliases")
    if value is None:
        return {}
    try:
        aliases = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError):
        aliases = None
    if not isinstance(aliases, dict) or not all(
        type(key) is int and type(target) is int for key, target in aliases.items()
    ):
        raise ManifestError(
            display,
            f"`{node.name}.aten_overload_aliases` must be a literal dict of "
            "overload indices",
        )
    return aliases


def scan_bases(source_dir: Path) -> dict[str, Base]:
    """Every operator base of the tree, by operator name."""
    bases = {}
    for path in sorted((source_dir / BASE_DIRECTORY).glob("*.py")):
        # `_`-prefixed modules hold helpers shared by bases, not operators.
        if not path.name.startswith("_"):
            base = read_base(source_dir, path)
            bases[base.name] = base
    return bases


def _python_sources(directory: Path) -> Iterable[Path]:
    for root, directories, files in os.walk(directory):
        directories[:] = sorted(
            name
            for name in directories
            if name not in ("__pycache__", "_generated") and not name.startswith(".")
        )
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(root, name)


def read_module_implementations(
    source_dir: Path, path: Path, backend: str | None = None
) -> list[Implementation]:
    """The implementations a module declares; `backend` defaults to its directory."""
    display = _relative(source_dir, path)
    try:
        declarations = read_implementations(path)
    except OpsConfigError as error:
        raise ManifestError(display, str(error).removeprefix(f"{path}: ")) from error
    module = module_name(source_dir, path)
    backend = backend or infer_backend(display.as_posix())
    implementations = []
    for declaration in declarations:
        if declaration.devices != "all":
            unknown = [d for d in declaration.devices if d not in PLATFORMS]
            if unknown:
                raise ManifestError(
                    display,
                    f"`{declaration.class_name}` names unknown device(s) "
                    f"{', '.join(unknown)}; known: {', '.join(PLATFORMS)}",
                )
        implementations.append(
            Implementation(
                operator=declaration.operator,
                slot=declaration.slot,
                backend=backend,
                module=module,
                class_name=declaration.class_name,
                devices=declaration.devices,
                path=display,
            )
        )
    return implementations


def scan_implementations(
    source_dir: Path, bases: Mapping[str, Base]
) -> list[Implementation]:
    """Every ``@implementation`` class under the backend directories."""
    implementations = []
    for backend in BACKENDS:
        for path in _python_sources(source_dir / PACKAGE_DIRECTORY / backend):
            for implementation in read_module_implementations(
                source_dir, path, backend
            ):
                if implementation.operator not in bases:
                    raise ManifestError(
                        implementation.path,
                        f"`{implementation.class_name}` implements unknown operator "
                        f"{implementation.operator!r}: there is no "
                        f"{BASE_DIRECTORY.as_posix()}/{implementation.operator}.py",
                    )
                implementations.append(implementation)
    return implementations
