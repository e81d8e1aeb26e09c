"""The model the build generators share: the schema from `infini.ops.core`
and the records the scan, the selection and the writers pass along.

The generators run at configure time, possibly in pip's isolated build
environment without torch, so they import `infini.ops.core` (standard
library only) from the `src/` directory beside `scripts/`, never from an
installed copy. Nothing here reads the source tree; `source_scan.py` does.

The modules under `scripts/` import each other in one direction:
`build_model` <- `ops_config` <- `source_scan` <- `aten_names` <-
`selection` <- `generate_torch_ops` <- `generate_manifest`; the docs and
README writers read the model and the scan.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOURCE_ROOT = Path(__file__).resolve().parent.parent
if str(SOURCE_ROOT / "src") not in sys.path:
    sys.path.insert(0, str(SOURCE_ROOT / "src"))

from infini.ops.core.devices import (  # noqa: E402  (after the path is set)
    PLATFORM_SETS,
    PLATFORMS,
)
from infini.ops.core.schema import (  # noqa: E402
    BACKENDS,
    GENERATED_ATEN_CLASS_PREFIX,
    GENERATED_ATEN_MODULE,
    GENERATED_ATEN_SLOT,
    MANIFEST_FORMAT_VERSION,
    MAX_IMPLEMENTATIONS,
    TORCH_METADATA_FORMAT_VERSION,
    TORCH_METADATA_NAME,
    class_name_of,
)
from infini.ops.core.signature import parse_overload  # noqa: E402

__all__ = [
    "BACKENDS",
    "BASE_DIRECTORY",
    "GENERATED_ATEN_CLASS_PREFIX",
    "GENERATED_ATEN_MODULE",
    "GENERATED_ATEN_SLOT",
    "MANIFEST_FORMAT_VERSION",
    "MAX_IMPLEMENTATIONS",
    "PACKAGE_DIRECTORY",
    "PLATFORMS",
    "PLATFORM_SETS",
    "SOURCE_ROOT",
    "TORCH_METADATA_FORMAT_VERSION",
    "TORCH_METADATA_NAME",
    "Base",
    "BuildConfiguration",
    "Implementation",
    "ManifestError",
    "class_name_of",
    "parse_overload",
    "split_names",
    "write_json",
    "write_text_if_changed",
]

# Paths relative to the source root of the tree a generator reads.
PACKAGE_DIRECTORY = Path("src", "infini", "ops")
BASE_DIRECTORY = PACKAGE_DIRECTORY / "base"


class ManifestError(ValueError):
    """A problem in the sources or the selection, reported as ``<path>: <message>``."""

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        super().__init__(f"{path}: {message}")


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
    # ``{i: j}``: overload `i` calls the ATen schema of overload `j`.
    aten_overload_aliases: dict[int, int] = field(default_factory=dict)


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
    # The ATen metadata of the generated backend (`--with-torch`).
    torch_metadata: Path | None = None

    @property
    def backends(self) -> dict[str, bool]:
        enabled = {
            "native": True,
            "torch": self.with_torch,
            "triton": self.with_triton,
            "ninetoothed": self.with_ninetoothed,
            "linked": self.with_linked,
        }
        return {backend: enabled[backend] for backend in BACKENDS}


def split_names(text: str | None) -> list[str]:
    """Names of a comma- or semicolon-separated list, in order, without repeats."""
    names: list[str] = []
    for name in (text or "").replace(";", ",").split(","):
        name = name.strip()
        if name and name not in names:
            names.append(name)
    return names


def write_text_if_changed(path: Path, text: str) -> None:
    """Write `text` atomically, leaving the file untouched when unchanged (so
    builds and Sphinx see no new modification time)."""
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
        # `mkstemp` makes the file private; generated files are ordinary outputs.
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON with `write_text_if_changed`."""
    write_text_if_changed(path, json.dumps(data, indent=2) + "\n")
