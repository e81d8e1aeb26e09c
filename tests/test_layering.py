"""Import layering of the package and the build scripts.

The rules (docs/architecture.md, "Layers"):

- `infini.ops.core` imports nothing else of `infini.ops`; at module level it
  imports only the standard library (torch only inside functions);
- `infini.ops.base` imports only `core` (same rule for torch);
- `infini.ops.runtime`, the launch runtime the backends share, imports only
  `core` from this project;
- each backend (`native.<family>`, `torch`, `triton`, `ninetoothed`,
  `linked`) imports `core`, `base` and `runtime`, never another backend;
- `infini.ops.models` uses the public `infini.ops` surface and `core` only;
- the build scripts import each other without a cycle and take the overload
  parser from `core` instead of keeping their own.

The sources are read with `ast`, so the check costs no import and sees imports
inside functions too: a lazy import of another backend still couples them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
SOURCE_ROOT = REPOSITORY / "src"
PACKAGE = "infini.ops"
PACKAGE_ROOT = SOURCE_ROOT / "infini" / "ops"
SCRIPTS_ROOT = REPOSITORY / "scripts"

# Backends by the first one or two components under `infini.ops`; every
# `native.<family>` package is a backend of its own.
BACKEND_PACKAGES = ("torch", "triton", "ninetoothed", "linked")


@dataclass(frozen=True)
class Import:
    """One imported module, as seen in the source of `importer`."""

    importer: str
    target: str
    line: int
    # Inside a function (or under `if TYPE_CHECKING:`): runs only when called.
    lazy: bool

    def __str__(self) -> str:
        where = "inside a function" if self.lazy else "at module level"
        return f"{self.importer}:{self.line} imports {self.target} ({where})"


def module_name(path: Path, root: Path, prefix: str = "") -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(([prefix] if prefix else []) + parts)


def package_modules() -> dict[str, Path]:
    """Every module under `src/infini/ops` except build output."""
    modules = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        if "_generated" in path.parts or "__pycache__" in path.parts:
            continue
        modules[module_name(path, SOURCE_ROOT)] = path
    return modules


MODULES = package_modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` statement reads from."""
    if node.level == 0:
        return node.module or ""
    parts = importer.split(".")
    if not is_package:
        parts.pop()
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def imports_of(path: Path, importer: str, known_modules) -> list[Import]:
    """The modules `path` imports, with relative imports made absolute.

    `from package import name` counts as importing `package.name` when that
    is a module of `known_modules`, and `package` otherwise.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(importer, alias.name, node.lineno, lazy))
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(importer, is_package, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in known_modules else source
                found.append(Import(importer, target, node.lineno, lazy))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lazy = True
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, lazy)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    visit(tree, False)
    return found


def layer_of(module: str) -> str:
    """The layer of a module of `infini.ops`: `surface` for the package itself
    and its `__main__`, `core`, `base`, `runtime`, `models`, `generated`, or
    the backend (`native.cpu`, `torch`, ...)."""
    if module in (PACKAGE, f"{PACKAGE}.__main__"):
        return "surface"
    parts = module[len(PACKAGE) + 1 :].split(".")
    if parts[0] == "native":
        # `infini.ops.native` alone is the namespace the families share.
        return "native" if len(parts) == 1 else f"native.{parts[1]}"
    if parts[0] == "_generated":
        return "generated"
    return parts[0]


def is_backend(layer: str) -> bool:
    return layer.startswith("native.") or layer in BACKEND_PACKAGES


def is_project(target: str) -> bool:
    return target == PACKAGE or target.startswith(PACKAGE + ".")


def is_standard_library(target: str) -> bool:
    return target.split(".")[0] in sys.stdlib_module_names


ALL_IMPORTS = [
    found
    for module, path in MODULES.items()
    for found in imports_of(path, module, MODULES)
]


def imports_in(layer_test) -> list[Import]:
    return [found for found in ALL_IMPORTS if layer_test(layer_of(found.importer))]


def report(violations: list[Import], rule: str) -> str:
    # One line per statement: `from x import a, b` yields one `Import` each.
    lines = dict.fromkeys(str(violation) for violation in violations)
    return f"{rule}:\n" + "\n".join(f"  {line}" for line in lines)


def test_every_package_module_has_a_layer():
    known = {"surface", "core", "base", "runtime", "models", "generated", "native"}
    unknown = sorted(
        module
        for module in MODULES
        if not (layer_of(module) in known or is_backend(layer_of(module)))
    )
    assert not unknown, (
        "modules outside every known layer (add the package to this test's "
        f"rules): {unknown}"
    )


def _specification_violations(layer: str, allowed_layers: set[str]) -> list[Import]:
    """Imports of `layer` that break the specification-layer rule: only the
    standard library and `allowed_layers` of this project at module level,
    plus torch inside functions."""
    violations = []
    for found in imports_in(lambda name: name == layer):
        if is_project(found.target):
            if layer_of(found.target) not in allowed_layers:
                violations.append(found)
        elif is_standard_library(found.target):
            continue
        elif not (found.lazy and found.target.split(".")[0] == "torch"):
            violations.append(found)
    return violations


def test_core_imports_only_the_standard_library_and_itself():
    violations = _specification_violations("core", {"core"})
    assert not violations, report(
        violations,
        "`infini.ops.core` imports the standard library and itself only "
        "(torch inside functions)",
    )


def test_base_imports_only_core():
    violations = _specification_violations("base", {"core", "base"})
    assert not violations, report(
        violations,
        "`infini.ops.base` imports the standard library and `core` only "
        "(torch inside functions)",
    )


def test_runtime_imports_only_core_from_this_project():
    violations = [
        found
        for found in imports_in(lambda name: name == "runtime")
        if is_project(found.target)
        and layer_of(found.target) not in ("core", "runtime")
    ]
    assert not violations, report(
        violations, "`infini.ops.runtime` imports only `core` of this project"
    )


def test_backends_never_import_each_other():
    shared = {"core", "base", "runtime", "native"}
    violations = [
        found
        for found in imports_in(is_backend)
        if is_project(found.target)
        and layer_of(found.target) not in shared
        and layer_of(found.target) != layer_of(found.importer)
        # The `precompile` hooks warm the kernel caches by calling operators
        # through the public functions, as a caller would; they import the
        # package when they run, never when the backend is loaded.
        and not (layer_of(found.target) == "surface" and found.lazy)
    ]
    assert not violations, report(
        violations,
        "a backend imports `core`, `base`, `runtime` and itself, never another "
        "backend (nor the public surface at module level)",
    )


def test_models_use_only_the_public_surface_and_core():
    violations = [
        found
        for found in imports_in(lambda name: name == "models")
        if is_project(found.target)
        and layer_of(found.target) not in ("surface", "core", "models")
    ]
    assert not violations, report(
        violations, "`infini.ops.models` uses the public `infini.ops` and `core` only"
    )


# -- the build scripts ---------------------------------------------------------

SCRIPTS = {path.stem: path for path in sorted(SCRIPTS_ROOT.glob("*.py"))}


def script_graph() -> dict[str, set[str]]:
    """Which scripts each script imports (at module level or lazily); the
    scripts directory is on `sys.path` when they run, so they import each
    other by file name."""
    graph = {}
    for name, path in SCRIPTS.items():
        targets = {found.target.split(".")[0] for found in imports_of(path, name, {})}
        graph[name] = {target for target in targets if target in SCRIPTS}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a path that returns to its start."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return visiting[visiting.index(node) :] + [node]
        if node in done:
            return None
        visiting.append(node)
        for successor in sorted(graph[node]):
            cycle = visit(successor)
            if cycle:
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        cycle = visit(node)
        if cycle:
            return cycle
    return None


def test_scripts_import_each_other_without_a_cycle():
    cycle = find_cycle(script_graph())
    assert cycle is None, "import cycle among scripts/: " + " -> ".join(cycle)


def test_scripts_take_the_overload_parser_from_core():
    # The overload grammar has one parser, `infini.ops.core.signature`; a
    # second one in the build would drift from what the runtime binds.
    defined = []
    imported_from_core = False
    for name, path in SCRIPTS.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and "parse_overload" in node.name
            ):
                defined.append(f"scripts/{name}.py:{node.lineno} {node.name}")
            if (
                isinstance(node, ast.ImportFrom)
                and node.module in (f"{PACKAGE}.core", f"{PACKAGE}.core.signature")
                and any(
                    alias.name in ("parse_overload", "signature")
                    for alias in node.names
                )
            ):
                imported_from_core = True
    assert not defined, "overload parsers defined in scripts/: " + ", ".join(defined)
    assert imported_from_core, (
        "no script imports the overload parser from `infini.ops.core.signature`"
    )


# -- importing the specification layer -----------------------------------------

_HEAVY_MODULES = ("numba", "numpy", "triton")

_IMPORT_CHECK = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(" ".join(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "modules",
    [
        pytest.param(
            [f"{PACKAGE}.core.dispatch", f"{PACKAGE}.core.signature"], id="core"
        ),
        pytest.param(
            [module for module in MODULES if layer_of(module) == "base"], id="base"
        ),
    ],
)
def test_specification_layer_imports_without_manifest_or_kernel_libraries(
    modules, tmp_path
):
    # A manifest path that does not exist: importing the specification layer
    # must not read it (the build scripts import `core` before any manifest
    # is written), and must not load a kernel library.
    environment = dict(os.environ)
    environment["INFINI_OPS_MANIFEST"] = str(tmp_path / "missing" / "manifest.json")
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(SOURCE_ROOT)] + [p for p in [environment.get("PYTHONPATH")] if p]
    )
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_CHECK.format(heavy=_HEAVY_MODULES), *modules],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"importing {modules[0]} and {len(modules) - 1} more modules failed:\n"
        f"{result.stderr[-2000:]}"
    )
    loaded = result.stdout.split()
    assert not loaded, f"importing the specification layer loaded {loaded}"
