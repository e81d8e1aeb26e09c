"""Resolve the linked providers of a build (`WITH_LINKED`, slots 16 and up).

A linked provider is a kernel library that another project ships inside its
Python distribution (vLLM's `_C`, flash-attn, apex, bitsandbytes). Its
contracts live under `src/infini/ops/linked/<transport>/<device>/`:

- `<library>.yaml` names the library: exactly the keys
  `python_distribution_package` and `library_glob` (relative to the
  distribution root; `{cpu_isa_suffix}` in it expands to the suffix of the
  CPU-specific build this CPU runs, see `cpu_isa_suffix`);
- `ops/<op>/<impl>.yaml` binds operator `<op>` to that library: `library`
  plus exactly one of `required_symbols` (exported names, demangled) and
  `operator_schema` + `dispatch_key` (a torch dispatcher operator; one
  registered without a dispatch key, a catch-all kernel such as vLLM's CPU
  attention has, is found under `CompositeImplicitAutograd`);
- `ops/<op>/<impl>.py`, beside it, is the adapter: the `@implementation`
  class that converts the arguments and calls the provider at run time.

For every selected linked implementation of an enabled device this module
finds the distribution (its RECORD, its root and its editable-install root),
requires exactly one file to match the glob, checks the symbols with both
`nm` and `readelf` (+ `c++filt`) and the schemas in a separate Python process
(two builds of one library must never meet in one process), and returns what
the manifest records. Every failure raises `ResolutionError` naming the YAML
file; the configure step fails with that message.

Run alone, it prints the resolution of the source tree for some devices:
``python scripts/resolve_linked.py --source-dir . --devices cpu``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from build_model import PACKAGE_DIRECTORY, Implementation, ManifestError

LINKED_DIRECTORY = PACKAGE_DIRECTORY / "linked"

# `torch`: the provider registers torch dispatcher operators (or exports C++
# functions taking `at::Tensor`), called through `torch.ops`. `c`: the
# provider exports plain C functions, called through `ctypes`.
TRANSPORTS = ("torch", "c")

LIBRARY_KEYS = ("python_distribution_package", "library_glob")
BINDING_KEYS = ("library", "required_symbols", "operator_schema", "dispatch_key")

# Linked providers take slots from here up, so they never displace a native,
# torch or JIT implementation as the default.
FIRST_LINKED_SLOT = 16

RESOLVED_FORMAT_VERSION = 1

# `(CPU flag, suffix)` in order of preference: vLLM's CPU wheel (and other
# PyTorch extensions built per instruction set) names its builds
# `_C.abi3.so` (AVX512-BF16), `_C_AVX512.abi3.so` and `_C_AVX2.abi3.so`.
CPU_ISA_SUFFIXES = (("avx512_bf16", ""), ("avx512f", "_AVX512"), ("avx2", "_AVX2"))


class ResolutionError(ManifestError):
    """A linked provider that cannot be resolved; the message names its YAML."""


@dataclass(frozen=True)
class LibraryContract:
    name: str
    transport: str
    device: str
    package: str
    glob: str
    path: Path


@dataclass(frozen=True)
class BindingContract:
    operator: str
    implementation: str
    transport: str
    device: str
    library: str
    required_symbols: tuple[str, ...] | None
    operator_schema: str | None
    dispatch_key: str | None
    path: Path

    @property
    def adapter(self) -> Path:
        return self.path.with_suffix(".py")


def cpu_isa_suffix(flags: Iterable[str] | None = None) -> str:
    """The build suffix this CPU runs (`INFINI_OPS_CPU_ISA_SUFFIX` overrides
    it, e.g. to build a package for another machine)."""
    override = os.environ.get("INFINI_OPS_CPU_ISA_SUFFIX")
    if override is not None:
        return override
    if flags is None:
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            text = ""
        flags = set()
        for line in text.splitlines():
            if line.startswith("flags"):
                flags.update(line.partition(":")[2].split())
    flags = set(flags)
    for flag, suffix in CPU_ISA_SUFFIXES:
        if flag in flags:
            return suffix
    return CPU_ISA_SUFFIXES[-1][1]


# -- Reading the contracts -------------------------------------------------------


def _strict_loader():
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """A safe loader that rejects a key given twice in one mapping."""

    def construct_mapping(loader, node, deep=False):
        loader.flatten_mapping(node)
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(
        yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping
    )
    return StrictLoader


def read_yaml(path: Path, source: Path | None = None) -> dict[str, Any]:
    """A YAML mapping, read strictly (duplicate keys fail) from `source`
    (default `path`, the name errors give)."""
    try:
        import yaml
    except ImportError as error:
        raise ResolutionError(
            path,
            "`WITH_LINKED` needs PyYAML to read the provider contracts: "
            "`python -m pip install pyyaml`",
        ) from error
    try:
        data = yaml.load(
            (source or path).read_text(encoding="utf-8"), Loader=_strict_loader()
        )
    except (OSError, yaml.YAMLError) as error:
        raise ResolutionError(path, f"cannot be read: {error}") from error
    if not isinstance(data, dict):
        raise ResolutionError(path, "must be a YAML mapping")
    return data


def _check_keys(path: Path, data: Mapping, allowed: Sequence[str], required) -> None:
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise ResolutionError(
            path, f"contains unknown keys: {', '.join(map(str, unknown))}"
        )
    missing = [key for key in required if key not in data]
    if missing:
        raise ResolutionError(path, f"is missing required keys: {', '.join(missing)}")


def read_library(
    path: Path, transport: str, device: str, source: Path | None = None
) -> LibraryContract:
    data = read_yaml(path, source)
    _check_keys(path, data, LIBRARY_KEYS, LIBRARY_KEYS)
    for key in LIBRARY_KEYS:
        if not isinstance(data[key], str) or not data[key].strip():
            raise ResolutionError(path, f"{key} must be a non-empty string")
    glob = data["library_glob"].strip()
    posix = PurePosixPath(glob)
    if posix.is_absolute() or glob.startswith("\\") or ".." in posix.parts:
        raise ResolutionError(
            path,
            f"library_glob '{glob}' must be relative to the distribution root "
            "(no absolute path, no '..')",
        )
    return LibraryContract(
        name=path.stem,
        transport=transport,
        device=device,
        package=data["python_distribution_package"].strip(),
        glob=glob,
        path=path,
    )


def read_binding(
    path: Path, transport: str, device: str, operator: str, source: Path | None = None
) -> BindingContract:
    data = read_yaml(path, source)
    _check_keys(path, data, BINDING_KEYS, ("library",))
    if not isinstance(data["library"], str) or not data["library"].strip():
        raise ResolutionError(path, "library must be a non-empty string")
    has_symbols = "required_symbols" in data
    has_schema = "operator_schema" in data
    if has_symbols == has_schema:
        raise ResolutionError(
            path, "must define exactly one of required_symbols or operator_schema"
        )
    if "dispatch_key" in data and not has_schema:
        raise ResolutionError(path, "dispatch_key requires operator_schema")
    if has_schema and "dispatch_key" not in data:
        raise ResolutionError(path, "operator_schema requires dispatch_key")
    symbols = schema = key = None
    if has_symbols:
        symbols = data["required_symbols"]
        if (
            not isinstance(symbols, list)
            or not symbols
            or not all(isinstance(s, str) and s.strip() for s in symbols)
        ):
            raise ResolutionError(
                path, "required_symbols must be a non-empty list of strings"
            )
        symbols = tuple(s.strip() for s in symbols)
        if len(set(symbols)) != len(symbols):
            raise ResolutionError(path, "required_symbols contains duplicates")
    else:
        schema, key = data["operator_schema"], data["dispatch_key"]
        for name, value in (("operator_schema", schema), ("dispatch_key", key)):
            if not isinstance(value, str) or not value.strip():
                raise ResolutionError(path, f"{name} must be a non-empty string")
        schema = " ".join(schema.split())
        key = key.strip()
        if "::" not in schema.partition("(")[0]:
            raise ResolutionError(
                path,
                f"operator_schema '{schema}' must name its operator as "
                "`namespace::name`",
            )
    return BindingContract(
        operator=operator,
        implementation=path.stem,
        transport=transport,
        device=device,
        library=data["library"].strip(),
        required_symbols=symbols,
        operator_schema=schema,
        dispatch_key=key,
        path=path,
    )


def _directories(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    return sorted(
        child
        for child in path.iterdir()
        if child.is_dir() and not child.name.startswith(("_", "."))
    )


def scan_contracts(
    source_dir: Path, devices: Sequence[str]
) -> tuple[dict[tuple[str, str, str], LibraryContract], list[BindingContract]]:
    """Every contract of the enabled `devices`: libraries by
    ``(transport, device, name)`` and bindings."""
    root = source_dir / LINKED_DIRECTORY
    libraries: dict[tuple[str, str, str], LibraryContract] = {}
    bindings: list[BindingContract] = []
    for transport_directory in _directories(root):
        transport = transport_directory.name
        if transport not in TRANSPORTS:
            raise ResolutionError(
                _display(source_dir, transport_directory),
                f"unsupported transport '{transport}'; expected "
                f"{' or '.join(TRANSPORTS)}",
            )
        for device_directory in _directories(transport_directory):
            device = device_directory.name
            if device not in devices:
                continue
            for path in sorted(device_directory.glob("*.yaml")):
                library = read_library(
                    _display(source_dir, path), transport, device, path
                )
                libraries[(transport, device, library.name)] = library
            for operator_directory in _directories(device_directory / "ops"):
                for path in sorted(operator_directory.glob("*.yaml")):
                    display = _display(source_dir, path)
                    bindings.append(
                        read_binding(
                            display, transport, device, operator_directory.name, path
                        )
                    )
    return libraries, bindings


def _display(source_dir: Path, path: Path) -> Path:
    try:
        return path.resolve().relative_to(source_dir.resolve())
    except ValueError:
        return path


# -- Finding the libraries -----------------------------------------------------


def distribution_roots(package: str) -> tuple[list[Path], list[str]] | None:
    """``(roots, RECORD entries)`` of an installed distribution, or None.

    The roots are the directory the distribution installs into and, for an
    editable install, the project directory its `direct_url.json` names.
    """
    from importlib import metadata

    try:
        distribution = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None
    roots = [Path(distribution.locate_file("")).resolve()]
    try:
        record = [str(entry) for entry in distribution.files or ()]
    except (TypeError, ValueError):
        # A malformed RECORD only loses that search path.
        record = []
    direct_url = distribution.read_text("direct_url.json")
    if direct_url:
        try:
            info = json.loads(direct_url)
        except ValueError:
            info = {}
        url = info.get("url", "")
        if info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            from urllib.parse import unquote, urlparse

            roots.append(Path(unquote(urlparse(url).path)).resolve())
    return roots, record


def find_library(library: LibraryContract, binding_path: Path) -> Path:
    found = distribution_roots(library.package)
    if found is None:
        raise ResolutionError(
            library.path,
            f"Python distribution package '{library.package}' required by "
            f"{binding_path.as_posix()} is not installed",
        )
    roots, record = found
    glob = library.glob.replace("{cpu_isa_suffix}", cpu_isa_suffix())
    matches: set[Path] = set()
    for entry in record:
        if fnmatch.fnmatchcase(PurePosixPath(entry).as_posix(), glob):
            candidate = (roots[0] / entry).resolve()
            if candidate.is_file():
                matches.add(candidate)
    for root in roots:
        matches.update(p.resolve() for p in root.glob(glob) if p.is_file())
    if len(matches) != 1:
        listed = ", ".join(p.as_posix() for p in sorted(matches)) or "none"
        raise ResolutionError(
            library.path,
            f"library_glob '{glob}' matched {len(matches)} files in "
            f"'{library.package}': {listed}",
        )
    return matches.pop()


# -- Symbols ---------------------------------------------------------------------


def _run_tool(arguments: Sequence[str]) -> str | None:
    if shutil.which(arguments[0]) is None:
        return None
    result = subprocess.run(arguments, capture_output=True, text=True, check=False)
    return result.stdout if result.returncode == 0 else None


# `nm` types of defined symbols: text, data, read-only, BSS, weak, unique,
# indirect functions (lower case: local, which `-D` never lists anyway).
_NM_DEFINED = set("TtDdRrBbWwVvuiGgSs")


def exported_symbols(library: Path) -> dict[str, set[str] | None]:
    """Demangled names a library exports, per tool (None: tool unavailable)."""
    symbols: dict[str, set[str] | None] = {}
    output = _run_tool(["nm", "-D", "--defined-only", "-C", str(library)])
    if output is None:
        symbols["nm"] = None
    else:
        names = set()
        for line in output.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in _NM_DEFINED:
                names.add(parts[2].strip())
        symbols["nm"] = names
    output = _run_tool(["readelf", "--dyn-syms", "--wide", str(library)])
    if output is None:
        symbols["readelf"] = None
    else:
        mangled = []
        for line in output.splitlines():
            fields = line.split()
            # Num: Value Size Type Bind Vis Ndx Name
            if len(fields) >= 8 and fields[0].endswith(":") and fields[6] != "UND":
                if fields[4] in ("GLOBAL", "WEAK", "UNIQUE", "GNU_UNIQUE"):
                    mangled.append(re.sub(r"@.*$", "", fields[7]))
        demangled = _run_tool_with_input(["c++filt"], "\n".join(mangled))
        if demangled is None:
            symbols["readelf"] = set(mangled)
        else:
            symbols["readelf"] = set(demangled.splitlines())
    return symbols


def _run_tool_with_input(arguments: Sequence[str], text: str) -> str | None:
    if shutil.which(arguments[0]) is None:
        return None
    result = subprocess.run(
        arguments, input=text, capture_output=True, text=True, check=False
    )
    return result.stdout if result.returncode == 0 else None


def check_symbols(
    binding: BindingContract, library: Path, exported: Mapping[str, set[str] | None]
) -> None:
    available = {tool: names for tool, names in exported.items() if names is not None}
    if not available:
        raise ResolutionError(
            binding.path,
            "cannot check required_symbols: neither `nm` nor `readelf` is installed",
        )
    for symbol in binding.required_symbols or ():
        missing = [tool for tool, names in available.items() if symbol not in names]
        if missing:
            raise ResolutionError(
                binding.path,
                f"required symbol '{symbol}' is not exported by {library.as_posix()} "
                f"according to {' and '.join(missing)}",
            )


# -- Dispatcher schemas ------------------------------------------------------------

# Runs in a fresh interpreter: loads one library, then reports per contract
# what is wrong (an empty string when nothing is).
_SCHEMA_CHECK = r"""
import json, sys
import torch

library, contracts = sys.argv[1], json.loads(sys.argv[2])
# A kernel registered without a dispatch key (`m.def(schema, function)`)
# serves every backend; torch files it under this key.
CATCH_ALL = "CompositeImplicitAutograd"
torch.ops.load_library(library)
problems = []
for schema, key in contracts:
    expected = " ".join(schema.split())
    try:
        expected = str(torch._C.parse_schema(expected))
    except RuntimeError as error:
        problems.append(f"cannot parse: {error}".splitlines()[0])
        continue
    qualified, _, rest = expected.partition("(")
    name, _, overload = qualified.partition(".")
    namespace, _, op = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        registered = [getattr(packet, o)._schema for o in packet.overloads()]
    except (AttributeError, RuntimeError):
        problems.append("not registered")
        continue
    wanted = [s for s in registered if (s.overload_name or "") == overload]
    if not wanted:
        problems.append("not registered")
        continue
    actual = str(wanted[0])
    if actual != expected:
        problems.append(f"registered as '{actual}'")
        continue
    if not torch._C._dispatch_has_kernel_for_dispatch_key(
        qualified if overload else name, key
    ):
        problem = f"has no kernel for dispatch key {key}"
        if torch._C._dispatch_has_kernel_for_dispatch_key(
            qualified if overload else name, CATCH_ALL
        ):
            problem += (
                f" (it is registered without a dispatch key, as {CATCH_ALL}: "
                f"name that key)"
            )
        problems.append(problem)
        continue
    problems.append("")
print(json.dumps(problems))
"""


def check_schemas(
    library: Path, bindings: Sequence[BindingContract], python: Sequence[str]
) -> None:
    contracts = [(b.operator_schema, b.dispatch_key) for b in bindings]
    result = subprocess.run(
        [*python, "-c", _SCHEMA_CHECK, str(library), json.dumps(contracts)],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        problems = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        problems = [f"loading {library.as_posix()} failed: {detail}"] * len(bindings)
    failures = [
        f"'{b.operator_schema}' ({b.path.as_posix()}): {problem}"
        for b, problem in zip(bindings, problems)
        if problem
    ]
    if failures:
        raise ResolutionError(
            bindings[0].path,
            "dispatcher contracts are not provided by the resolved libraries: "
            + "; ".join(failures),
        )


# -- Resolution --------------------------------------------------------------------


def resolve(
    source_dir: Path,
    devices: Sequence[str],
    implementations: Iterable[Implementation],
    python: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Resolve the linked `implementations` (already selected and narrowed to
    the enabled `devices`); returns the manifest's `linked` section."""
    python = list(python or [sys.executable])
    libraries, bindings = scan_contracts(source_dir, devices)
    by_adapter = {(b.adapter.as_posix(), b.device): b for b in bindings}
    for binding in bindings:
        if not (source_dir / binding.adapter).is_file():
            raise ResolutionError(
                binding.path, f"missing sibling {binding.adapter.name}"
            )
        if (binding.transport, binding.device, binding.library) not in libraries:
            raise ResolutionError(
                binding.path,
                f"unknown library '{binding.library}' for device {binding.device}",
            )

    chosen: list[tuple[BindingContract, Implementation]] = []
    for implementation in implementations:
        if implementation.backend != "linked":
            continue
        path = implementation.path.as_posix()
        if implementation.slot < FIRST_LINKED_SLOT:
            raise ResolutionError(
                path,
                f"`{implementation.class_name}` declares slot {implementation.slot}; "
                f"linked providers take slots {FIRST_LINKED_SLOT} and up",
            )
        for device in implementation.devices:
            binding = by_adapter.get((path, device))
            if binding is None:
                raise ResolutionError(
                    path,
                    f"`{implementation.class_name}` serves {device} but "
                    f"{Path(path).with_suffix('.yaml').as_posix()} is not a binding "
                    f"of a {device} provider (missing sibling "
                    f"{Path(path).with_suffix('.yaml').name})",
                )
            if binding.operator != implementation.operator:
                raise ResolutionError(
                    path,
                    f"`{implementation.class_name}` implements "
                    f"'{implementation.operator}' but lies under ops/"
                    f"{binding.operator}/",
                )
            chosen.append((binding, implementation))

    resolved_libraries: dict[tuple[str, str, str], Path] = {}
    for binding, _ in chosen:
        key = (binding.transport, binding.device, binding.library)
        if key not in resolved_libraries:
            resolved_libraries[key] = find_library(libraries[key], binding.path)

    basenames: dict[str, Path] = {}
    for path in resolved_libraries.values():
        other = basenames.setdefault(path.name, path)
        if other != path:
            raise ResolutionError(
                libraries[
                    next(k for k, p in resolved_libraries.items() if p == path)
                ].path,
                f"linked libraries share basename '{path.name}': "
                f"{other.as_posix()} and {path.as_posix()}",
            )

    # Symbols are read from every library of a (transport, device) that has
    # a symbol binding, so a symbol that two of them export is noticed.
    symbol_scopes = {(b.transport, b.device) for b, _ in chosen if b.required_symbols}
    exported = {
        key: exported_symbols(path)
        for key, path in resolved_libraries.items()
        if key[:2] in symbol_scopes
    }
    for binding, _ in chosen:
        if not binding.required_symbols:
            continue
        key = (binding.transport, binding.device, binding.library)
        check_symbols(binding, resolved_libraries[key], exported[key])
        for symbol in binding.required_symbols:
            owners = [
                path.as_posix()
                for other_key, path in resolved_libraries.items()
                if other_key[:2] == key[:2]
                and any(
                    names is not None and symbol in names
                    for names in exported.get(other_key, {}).values()
                )
            ]
            if len(owners) > 1:
                raise ResolutionError(
                    binding.path,
                    f"required symbol '{symbol}' is exported by multiple linked "
                    f"libraries: {', '.join(owners)}",
                )

    for key, path in resolved_libraries.items():
        schema_bindings = [
            b
            for b, _ in chosen
            if b.operator_schema and (b.transport, b.device, b.library) == key
        ]
        if schema_bindings:
            check_schemas(path, schema_bindings, python)

    from importlib import metadata

    return {
        "format_version": RESOLVED_FORMAT_VERSION,
        "libraries": [
            {
                "name": name,
                "transport": transport,
                "device": device,
                "package": libraries[(transport, device, name)].package,
                "version": metadata.version(
                    libraries[(transport, device, name)].package
                ),
                "path": path.as_posix(),
                "contract": libraries[(transport, device, name)].path.as_posix(),
            }
            for (transport, device, name), path in sorted(resolved_libraries.items())
        ],
        "bindings": [
            {
                "operator": binding.operator,
                "device": binding.device,
                "slot": implementation.slot,
                "transport": binding.transport,
                "library": binding.library,
                "module": implementation.module,
                "class": implementation.class_name,
                "contract": binding.path.as_posix(),
                **(
                    {"required_symbols": list(binding.required_symbols)}
                    if binding.required_symbols
                    else {
                        "operator_schema": binding.operator_schema,
                        "dispatch_key": binding.dispatch_key,
                    }
                ),
            }
            for binding, implementation in sorted(
                chosen, key=lambda c: (c[0].operator, c[0].device, c[1].slot)
            )
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    from build_model import BuildConfiguration, split_names
    from selection import select_implementations
    from source_scan import scan_bases, scan_implementations

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=Path, default=Path("."))
    parser.add_argument("--devices", default="cpu")
    parser.add_argument("--ops", help="operator allowlist, comma/semicolon separated")
    parser.add_argument("--ops-config", type=Path)
    parser.add_argument("--output", type=Path, help="write the resolution here")
    arguments = parser.parse_args(argv)
    ops = arguments.ops
    ops_config = arguments.ops_config
    if ops is None and ops_config is None:
        # Like the configure step: `INFINI_OPS_OPS` names a config or a list.
        value = os.environ.get("INFINI_OPS_OPS", "").strip()
        if value.endswith(".json"):
            ops_config = Path(value)
        elif value:
            ops = value
    configuration = BuildConfiguration(
        devices=tuple(split_names(arguments.devices)),
        with_linked=True,
        ops=[name.lower() for name in split_names(ops)] or None,
        ops_config=ops_config,
    )
    try:
        bases = scan_bases(arguments.source_dir)
        implementations = scan_implementations(arguments.source_dir, bases)
        selected = select_implementations(
            arguments.source_dir,
            bases,
            implementations,
            configuration,
            lambda message: print(message, file=sys.stderr),
        )
        resolved = resolve(
            arguments.source_dir,
            configuration.devices,
            (i for impls in selected.values() for i in impls),
        )
    except ManifestError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    text = json.dumps(resolved, indent=2) + "\n"
    if arguments.output:
        arguments.output.parent.mkdir(parents=True, exist_ok=True)
        arguments.output.write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
