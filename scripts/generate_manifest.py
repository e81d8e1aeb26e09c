"""Write the build manifest: which operators, implementations and devices a build has.

CMake runs this at configure time with the resolved options; the package reads
the result (`infini/ops/_generated/manifest.json`) to build its public surface.
The operator bases (`src/infini/ops/base/<op>.py`) and the ``@implementation``
classes under `src/infini/ops/{native,torch,triton,ninetoothed,linked}/` are
read with `ast`, never imported, so configuring needs no kernel dependency.

Selection follows contract 4.2: an `ops.json` config (`--ops-config`) acts as
an allowlist of operators and slots, then the inline allowlist (`--ops`, or the
smoke list under `--smoke`) filters the result, warning about names that are
not available. Errors print ``<path>: <message>`` on stderr and exit with 1.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ops_config import (  # noqa: E402  (the scripts directory is not a package)
    ATEN_SLOT,
    OpsConfigError,
    header_path,
    implementation_slot,
    infer_backend,
    load_ops_config,
    read_implementations,
    torch_op_names,
)

FORMAT_VERSION = 1

# In the order of InfiniRT's `Device::Type`; the manifest lists devices in it.
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
BACKENDS = ("native", "torch", "triton", "ninetoothed", "linked")

PACKAGE_DIRECTORY = Path("src", "infini", "ops")
BASE_DIRECTORY = PACKAGE_DIRECTORY / "base"

SMOKE_OPS = (
    "add",
    "mul",
    "relu",
    "cast",
    "cat",
    "gemm",
    "matmul",
    "linear",
    "rms_norm",
    "swiglu",
    "silu_and_mul",
    "causal_softmax",
    "causal_softmax_infinilm",
    "abs",
    "clamp",
    "exp",
)
SMOKE_NVIDIA_OPS = ("cutlass_scaled_mm", "moe_sum")
SMOKE_NVIDIA_TORCH_OPS = ("flash_attn_varlen_func",)
SMOKE_TORCH_OPS = ("abs", "clamp", "exp", "relu")

# The ATen operators that get the generated implementation (slot 8) when the
# selection does not say otherwise (`scripts/generate_torch_ops.py` reads the
# same list). `torch_ops.txt` (one name per line) is the older form.
ATEN_OPS_FILE = Path("scripts", "torch_ops.yaml")
LEGACY_ATEN_OPS_FILE = Path("scripts", "torch_ops.txt")
# The module whose classes the package builds from `torch_ops_metadata.json`.
ATEN_MODULE = "infini.ops.torch.aten"
ATEN_IMPLEMENTATION_PREFIX = "Aten"

_PARAMETER = re.compile(
    r"(?P<name>[A-Za-z_]\w*)\s*:\s*"
    # A type has no spaces except around `|` (`int | None`), so a missing comma
    # between two parameters is an error rather than a strange type.
    r"(?P<type>[^\s=!]+(?:\s*\|\s*[^\s=!]+)*)\s*(?P<writes>!)?"
    r"\s*(?:=\s*(?P<default>\S.*))?"
)


class ManifestError(ValueError):
    """A problem in the sources or the selection, reported as ``<path>: <message>``."""

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class Parameter:
    """One parameter of an overload string: ``name: Type[!][ = default]``."""

    name: str
    type: str
    writes: bool
    default: str | None


@dataclass(frozen=True)
class Base:
    """An operator base module, as read from its source."""

    name: str
    class_name: str
    trace_name: str
    module: str
    overloads: tuple[str, ...]
    docstring: str
    path: Path


@dataclass(frozen=True)
class Implementation:
    """An ``@implementation`` class; `devices` is a tuple of platforms or "all"."""

    operator: str
    slot: int
    backend: str
    module: str
    class_name: str
    devices: tuple[str, ...] | str
    path: Path


@dataclass
class BuildConfiguration:
    """The resolved configure options the selection depends on."""

    devices: tuple[str, ...] = ("cpu",)
    with_torch: bool = False
    with_triton: bool = False
    with_ninetoothed: bool = False
    with_linked: bool = False
    ops: list[str] | None = None
    ops_config: Path | None = None
    torch_ops: list[str] | None = None
    smoke: bool = False
    strict_ops: bool = False
    instantiations: bool = True
    python_bindings: bool = True
    package_version: str = "0.1.0"
    options: dict[str, Any] = field(default_factory=dict)
    # `torch_ops_metadata.json` of the generated ATen backend (`--with-torch`).
    torch_metadata: Path | None = None

    @property
    def backends(self) -> dict[str, bool]:
        return {
            "native": True,
            "torch": self.with_torch,
            "triton": self.with_triton,
            "ninetoothed": self.with_ninetoothed,
            "linked": self.with_linked,
        }


def class_name_of(op: str) -> str:
    """The public class of an operator: PascalCase of every `_`-separated part."""
    return "".join(part[:1].upper() + part[1:] for part in op.split("_"))


def split_names(text: str | None) -> list[str]:
    """Names of a comma- or semicolon-separated list, in order, without repeats."""
    names: list[str] = []
    for name in re.split(r"[,;]", text or ""):
        name = name.strip()
        if name and name not in names:
            names.append(name)
    return names


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, character in enumerate(text):
        if character in "[(<":
            depth += 1
        elif character in "])>":
            depth -= 1
        elif character == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def parse_overload(text: str) -> list[Parameter]:
    """The parameters of an overload string; raises `ValueError` when malformed."""
    if not text.strip():
        return []
    parameters = []
    for part in _split_top_level(text):
        match = _PARAMETER.fullmatch(part)
        if match is None:
            raise ValueError(f"parameter {part!r} is not `name: Type[!][ = default]`")
        if any(parameter.name == match["name"] for parameter in parameters):
            raise ValueError(f"parameter {match['name']!r} appears twice")
        parameters.append(
            Parameter(
                match["name"],
                match["type"],
                match["writes"] is not None,
                match["default"],
            )
        )
    return parameters


def _module_name(source_dir: Path, path: Path) -> str:
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


def _class_attribute(node: ast.ClassDef, name: str) -> ast.AST | None:
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
        if isinstance(node, ast.ClassDef) and _class_attribute(node, "name")
    ]
    if not classes:
        raise ManifestError(
            display, "defines no operator class (a class with a literal `name`)"
        )
    if len(classes) > 1:
        names = ", ".join(f"`{node.name}`" for node in classes)
        raise ManifestError(display, f"defines more than one operator class: {names}")
    node = classes[0]

    name = _literal_string(_class_attribute(node, "name"))
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

    trace_value = _class_attribute(node, "trace_name")
    trace_name = node.name if trace_value is None else _literal_string(trace_value)
    if not trace_name:
        raise ManifestError(
            display, f"`{node.name}.trace_name` must be a literal non-empty string"
        )

    try:
        overloads = ast.literal_eval(_class_attribute(node, "overloads"))
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
        module=_module_name(source_dir, path),
        overloads=tuple(overloads),
        docstring=ast.get_docstring(node) or ast.get_docstring(tree) or "",
        path=display,
    )


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
    module = _module_name(source_dir, path)
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


def load_aten_op_names(source_dir: Path) -> list[str]:
    """The ATen list as public operator names (`add_` -> `add`, `_x` ->
    `internal_x`): operators whose generated slot-8 implementation is built.

    Read from `scripts/torch_ops.yaml` (contract 3.1), else from the older
    `scripts/torch_ops.txt` (one name per line, `#` comments); empty without.
    """
    from generate_torch_ops import load_torch_op_list, public_op_name

    path = source_dir / ATEN_OPS_FILE
    if path.is_file():
        names = load_torch_op_list(path)
    else:
        path = source_dir / LEGACY_ATEN_OPS_FILE
        if not path.is_file():
            return []
        names = []
        for line in path.read_text(encoding="utf-8").splitlines():
            name = line.split("#", 1)[0].strip()
            if name:
                names.append(name)
    public = []
    for name in names:
        if public_op_name(name) not in public:
            public.append(public_op_name(name))
    return public


def aten_op_selection(source_dir: Path, configuration: BuildConfiguration) -> set[str]:
    """Public names that get the generated ATen slot (contract 4.2): the ATen
    list, or what an `ops.json` selects for slot 8, then intersected with the
    `INFINI_OPS_TORCH_OPS` allowlist (the smoke set in a smoke build)."""
    from generate_torch_ops import public_op_name

    config_path = configuration.ops_config
    config = load_ops_config(config_path) if config_path is not None else None
    selected = set(torch_op_names(config, load_aten_op_names(source_dir)))
    allowlist = configuration.torch_ops
    if allowlist is None and configuration.smoke:
        allowlist = list(SMOKE_TORCH_OPS)
    if allowlist is not None:
        # The allowlist names ATen operators (`add_`, `_softmax`) or public ones.
        selected &= {public_op_name(name) for name in allowlist} | set(allowlist)
    return selected


def generated_aten_operators(
    metadata: Mapping[str, Any], bases: dict[str, Base]
) -> list[Implementation]:
    """Slot-8 implementations of the ATen metadata; adds the bases of
    operators that have no hand-written one to `bases`."""
    implementations = []
    path = Path("scripts", "generate_torch_ops.py")
    for op, info in metadata.get("operators", {}).items():
        if info.get("base") is None and op not in bases:
            bases[op] = Base(
                name=op,
                class_name=info["class"],
                trace_name=info["trace_name"],
                module=ATEN_MODULE,
                overloads=tuple(info["overloads"]),
                docstring=f"PyTorch's `{op}` (generated from the ATen schema).",
                path=path,
            )
        if op not in bases:
            continue
        implementations.append(
            Implementation(
                operator=op,
                slot=ATEN_SLOT,
                backend="torch",
                module=ATEN_MODULE,
                class_name=ATEN_IMPLEMENTATION_PREFIX + info["class"],
                devices="all",
                path=path,
            )
        )
    return implementations


def smoke_ops(devices: Sequence[str], with_torch: bool) -> list[str]:
    """The operator allowlist of a smoke build (contract 4.2)."""
    ops = list(SMOKE_OPS)
    if "nvidia" in devices:
        ops += SMOKE_NVIDIA_OPS
        if with_torch:
            ops += SMOKE_NVIDIA_TORCH_OPS
    return ops


def _active(
    implementation: Implementation, configuration: BuildConfiguration
) -> Implementation | None:
    """`implementation` narrowed to the enabled devices, or None if inactive."""
    # A descriptor may name a backend this build does not know; the user asked
    # for that module explicitly, so it counts as enabled.
    if not configuration.backends.get(implementation.backend, True):
        return None
    if implementation.devices == "all":
        devices = tuple(configuration.devices)
    else:
        devices = tuple(d for d in configuration.devices if d in implementation.devices)
    return replace(implementation, devices=devices) if devices else None


def _check_unique_slots(implementations: Iterable[Implementation]) -> None:
    owners: dict[tuple[str, str, int], Implementation] = {}
    for implementation in implementations:
        for device in implementation.devices:
            key = (implementation.operator, device, implementation.slot)
            other = owners.setdefault(key, implementation)
            if other is not implementation:
                raise ManifestError(
                    implementation.path,
                    f"`{implementation.class_name}` declares slot "
                    f"{implementation.slot} of {implementation.operator!r} on "
                    f"{device}, which `{other.class_name}` in {other.path.as_posix()} "
                    "already declares",
                )


def _header_implementations(
    source_dir: Path,
    config_path: Path,
    op: str,
    headers: Sequence[str | Mapping[str, str]],
    configuration: BuildConfiguration,
) -> list[Implementation]:
    """The implementations of the modules an `ops.json` entry names explicitly."""
    package = (source_dir / PACKAGE_DIRECTORY).resolve()
    selected = []
    for header in headers:
        relative = header_path(header)
        path = (source_dir / relative).resolve()
        if not path.is_file():
            raise ManifestError(
                config_path, f"{op!r} implementation path {relative!r} does not exist"
            )
        if package not in path.parents:
            raise ManifestError(
                config_path,
                f"{op!r} implementation path {relative!r} is outside "
                f"{PACKAGE_DIRECTORY.as_posix()}/, so the package cannot import it",
            )
        try:
            implementation_slot(path)
        except OpsConfigError as error:
            raise ManifestError(config_path, str(error)) from error
        backend = None if isinstance(header, str) else header["backend"]
        declared = [
            implementation
            for implementation in read_module_implementations(source_dir, path, backend)
            if implementation.operator == op
        ]
        if not declared:
            raise ManifestError(
                config_path,
                f"{op!r} implementation path {relative!r} declares no "
                f"implementation of {op!r}",
            )
        for implementation in declared:
            active = _active(implementation, configuration)
            if active is not None:
                selected.append(active)
    return selected


def select_implementations(
    source_dir: Path,
    bases: Mapping[str, Base],
    implementations: Sequence[Implementation],
    configuration: BuildConfiguration,
    warn: Callable[[str], None],
) -> dict[str, list[Implementation]]:
    """The active implementations of each selected operator (contract 4.2)."""
    config_path = configuration.ops_config
    config = load_ops_config(config_path) if config_path is not None else None

    # Hand-written torch implementations are always built under `WITH_TORCH`;
    # only the generated ATen slot is pruned, by the ATen list, the config and
    # `INFINI_OPS_TORCH_OPS`.
    # Hand-written torch modules (`torch/ops/`) are never pruned, even at slot
    # 8 (`flash_attn_varlen_func`); the ATen module's implementations are.
    aten_ops = aten_op_selection(source_dir, configuration)

    available: dict[str, list[Implementation]] = {}
    for implementation in implementations:
        if (
            implementation.backend == "torch"
            and implementation.slot == ATEN_SLOT
            and implementation.module == ATEN_MODULE
            and implementation.operator not in aten_ops
        ):
            continue
        active = _active(implementation, configuration)
        if active is not None:
            available.setdefault(active.operator, []).append(active)
    _check_unique_slots(i for impls in available.values() for i in impls)

    if config is None:
        selected = available
    else:
        selected = {}
        for op, entry in config.items():
            if entry["headers"] is not None:
                if op not in bases:
                    raise ManifestError(
                        config_path,
                        f"operator {op!r} has no base "
                        f"({BASE_DIRECTORY.as_posix()}/{op}.py)",
                    )
                selected[op] = _header_implementations(
                    source_dir, config_path, op, entry["headers"], configuration
                )
                _check_unique_slots(selected[op])
                continue
            if op not in available:
                raise ManifestError(
                    config_path,
                    f"operator {op!r} is not available for the active devices",
                )
            slots = entry["implementations"]
            if slots is None:
                selected[op] = available[op]
                continue
            missing = sorted(set(slots) - {i.slot for i in available[op]})
            if missing:
                raise ManifestError(
                    config_path,
                    f"operator {op!r} has no active implementation at slot(s) "
                    f"{', '.join(map(str, missing))}",
                )
            selected[op] = [i for i in available[op] if i.slot in slots]

    allowlist = configuration.ops
    if allowlist is None and configuration.smoke and config is None:
        allowlist = smoke_ops(configuration.devices, configuration.with_torch)
    if allowlist is not None:
        unavailable = [op for op in allowlist if not selected.get(op)]
        selected = {op: impls for op, impls in selected.items() if op in allowlist}
    else:
        # Header-form entries whose modules serve none of the enabled devices.
        unavailable = [op for op, impls in selected.items() if not impls]
    if unavailable:
        message = (
            f"operator(s) not available for active devices: {', '.join(unavailable)}"
        )
        if configuration.strict_ops:
            raise ManifestError(config_path or "--ops", message)
        warn(f"warning: {message}")

    return {
        op: sorted(impls, key=lambda i: (i.slot, i.module, i.class_name))
        for op, impls in sorted(selected.items())
        if impls
    }


def build_manifest(
    source_dir: Path,
    configuration: BuildConfiguration,
    warn: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> dict[str, Any]:
    """The manifest of a build of the tree at `source_dir`."""
    unknown = [d for d in configuration.devices if d not in PLATFORMS]
    if unknown:
        raise ManifestError(
            "--devices",
            f"unknown device(s) {', '.join(unknown)}; known: {', '.join(PLATFORMS)}",
        )
    configuration = replace(
        configuration,
        devices=tuple(d for d in PLATFORMS if d in configuration.devices),
    )

    bases = scan_bases(source_dir)
    if not bases:
        warn(
            "warning: no operator bases found under "
            f"{(source_dir / BASE_DIRECTORY).as_posix()}"
        )
    implementations = scan_implementations(source_dir, bases)
    if configuration.with_torch and configuration.torch_metadata is not None:
        metadata = json.loads(configuration.torch_metadata.read_text(encoding="utf-8"))
        implementations += generated_aten_operators(metadata, bases)
    selected = select_implementations(
        source_dir, bases, implementations, configuration, warn
    )

    options = dict(configuration.options)
    if configuration.smoke:
        # The smoke lists live here, so the manifest records what they became.
        if configuration.ops is None and configuration.ops_config is None:
            options["INFINI_OPS_OPS"] = ";".join(
                smoke_ops(configuration.devices, configuration.with_torch)
            )
        if configuration.torch_ops is None:
            options["INFINI_OPS_TORCH_OPS"] = ";".join(SMOKE_TORCH_OPS)

    operators = {}
    instantiations = []
    for op, impls in selected.items():
        base = bases[op]
        operators[op] = {
            "class": class_name_of(op),
            "base_module": base.module,
            "trace_name": base.trace_name,
            "overloads": list(base.overloads),
            "implementations": [
                {
                    "slot": i.slot,
                    "backend": i.backend,
                    "module": i.module,
                    "class": i.class_name,
                    "devices": list(i.devices),
                }
                for i in impls
            ],
        }
        if configuration.instantiations:
            instantiations += [
                {"operator": op, "device": device, "slot": i.slot, "module": i.module}
                for i in impls
                for device in i.devices
            ]
    instantiations.sort(
        key=lambda e: (e["operator"], PLATFORMS.index(e["device"]), e["slot"])
    )

    return {
        "format_version": FORMAT_VERSION,
        "package_version": configuration.package_version,
        "options": options,
        "devices": list(configuration.devices),
        "backends": configuration.backends,
        "python_bindings": configuration.python_bindings,
        "operators": operators,
        "instantiations": instantiations,
    }


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """Write `manifest` atomically, leaving the file untouched when unchanged."""
    text = json.dumps(manifest, indent=2) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        # `mkstemp` makes the file private; the manifest is an ordinary output.
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def aten_names_to_generate(
    source_dir: Path, configuration: BuildConfiguration
) -> tuple[list[str], list[str]]:
    """The ATen names the generator must read for this selection, and those
    of them that may be absent from torch (names an `ops.json` selects for
    slot 8 without the ATen list naming them: `x` and `x_` are both tried)."""
    from generate_torch_ops import (
        TORCH_OPS_FILE,
        aten_names_of,
        load_torch_op_list,
        public_op_name,
    )

    selected = aten_op_selection(source_dir, configuration)
    listed = (
        load_torch_op_list(source_dir / TORCH_OPS_FILE)
        if (source_dir / TORCH_OPS_FILE).is_file()
        else []
    )
    names = [name for name in listed if public_op_name(name) in selected]
    covered = {public_op_name(name) for name in names}
    unlisted = [name for op in sorted(selected - covered) for name in aten_names_of(op)]
    return names + unlisted, unlisted


def generate_aten_metadata(
    source_dir: Path, configuration: BuildConfiguration, directory: Path, log=None
) -> Path:
    """Run the ATen generator for the selected operators (this interpreter
    must import torch); returns the metadata path (in `directory`)."""
    from generate_torch_ops import METADATA_NAME, run

    names, optional = aten_names_to_generate(source_dir, configuration)
    path = directory / METADATA_NAME
    if log is None:

        def log(line: str) -> None:
            print(line, file=sys.stderr)

    run(source_dir, path, names, log=log, optional_names=optional)
    return path


def _on_off(value: str) -> bool:
    normalised = value.strip().upper()
    if normalised in ("ON", "TRUE", "YES", "Y", "1"):
        return True
    if normalised in ("OFF", "FALSE", "NO", "N", "0", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected ON or OFF, got {value!r}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--devices", default="cpu", help='enabled platforms, e.g. "cpu;nvidia"'
    )
    for backend in ("torch", "triton", "ninetoothed", "linked"):
        parser.add_argument(f"--with-{backend}", action="store_true")
    parser.add_argument("--ops", help="operator allowlist, comma/semicolon separated")
    parser.add_argument("--ops-config", type=Path, help="an ops.json selection")
    parser.add_argument("--torch-ops", help="allowlist of generated ATen operators")
    parser.add_argument(
        "--torch-metadata",
        type=Path,
        help="torch_ops_metadata.json from scripts/generate_torch_ops.py; with "
        "--with-torch and without it, the metadata is generated beside --output",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="default the allowlists to the smoke set"
    )
    parser.add_argument(
        "--strict-ops",
        action="store_true",
        help="fail instead of warning about unavailable allowlisted operators",
    )
    parser.add_argument("--instantiations", type=_on_off, default=True)
    parser.add_argument("--python-bindings", type=_on_off, default=True)
    parser.add_argument("--package-version", default="0.1.0")
    parser.add_argument(
        "--options-json", default="{}", help="every option's resolved value"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        options = json.loads(arguments.options_json)
        if not isinstance(options, dict):
            raise ValueError("not a JSON object")
    except ValueError as error:
        print(f"--options-json: {error}", file=sys.stderr)
        return 1

    configuration = BuildConfiguration(
        devices=tuple(split_names(arguments.devices)),
        with_torch=arguments.with_torch,
        with_triton=arguments.with_triton,
        with_ninetoothed=arguments.with_ninetoothed,
        with_linked=arguments.with_linked,
        # An empty list selects nothing, which no one means: treat it as absent.
        ops=split_names(arguments.ops) or None,
        ops_config=arguments.ops_config,
        torch_ops=split_names(arguments.torch_ops) or None,
        smoke=arguments.smoke,
        strict_ops=arguments.strict_ops,
        instantiations=arguments.instantiations,
        python_bindings=arguments.python_bindings,
        package_version=arguments.package_version,
        options=options,
        torch_metadata=arguments.torch_metadata,
    )
    try:
        if configuration.with_torch and configuration.torch_metadata is None:
            configuration.torch_metadata = generate_aten_metadata(
                arguments.source_dir, configuration, arguments.output.parent
            )
        manifest = build_manifest(arguments.source_dir, configuration)
        write_manifest(arguments.output, manifest)
    except (ManifestError, OpsConfigError) as error:
        print(error, file=sys.stderr)
        return 1

    # CMake prints these lines as status messages; they avoid `;`, which CMake
    # would take for a list separator.
    operators = manifest["operators"]
    implementation_count = sum(len(o["implementations"]) for o in operators.values())
    enabled = [name for name, on in manifest["backends"].items() if on]
    print(
        f"operators: {len(operators)}, implementations: {implementation_count}, "
        f"devices: [{', '.join(manifest['devices'])}], "
        f"backends: [{', '.join(enabled)}]"
    )
    if arguments.smoke and not split_names(arguments.ops) and not arguments.ops_config:
        smoke_list = split_names(manifest["options"]["INFINI_OPS_OPS"])
        print(f"smoke operator allowlist: {', '.join(smoke_list)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
