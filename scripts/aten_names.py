"""The ATen operator list and the public names of ATen operators.

`scripts/torch_ops.yaml` names the ATen operators whose generated
implementation (slot 8) a build has; a public name drops a trailing `_` and
turns a leading `_` into `internal_`.
"""

from __future__ import annotations

import re
from pathlib import Path

from build_model import class_name_of

# The ATen list; `torch_ops.txt` (one name per line) is the older form.
TORCH_OPS_FILE = Path("scripts", "torch_ops.yaml")
LEGACY_TORCH_OPS_FILE = Path("scripts", "torch_ops.txt")

# Namespaces of the original's C++ types that an ATen name may start with.
NAMESPACES = ("special", "linalg", "fft")


def load_torch_op_list(path: Path) -> list[str]:
    """The ATen names of a `torch_ops.yaml` (a YAML list of strings).

    Parsed by hand (``- name`` lines, `#` comments) so that configuring needs
    no YAML package outside the torch interpreter.
    """
    names: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        if not text.startswith("- "):
            raise ValueError(f"{path}:{number}: expected `- <aten name>`, got {line!r}")
        name = text[2:].strip().strip("'\"")
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"{path}:{number}: {name!r} is not an ATen name")
        if name not in names:
            names.append(name)
    return names


def public_op_name(aten_name: str) -> str:
    """`_log_softmax` -> `internal_log_softmax`, `add_` -> `add`
    (docs/behaviour.md, "ATen names")."""
    name = aten_name
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    if name.startswith("_"):
        name = "internal" + name
    return name


def aten_names_of(public: str) -> list[str]:
    """The ATen names that map to a public name (`div` -> `div`, `div_`)."""
    base = (
        "_" + public[len("internal_") :] if public.startswith("internal_") else public
    )
    return [base, base + "_"]


def op_namespace_parts(public: str) -> tuple[list[str], str]:
    """Namespaces and stem of the original's C++ type (docs/behaviour.md, "ATen
    names")."""
    namespaces, rest = [], public
    if rest.startswith("internal_"):
        namespaces.append("internal")
        rest = rest[len("internal_") :]
    for namespace in NAMESPACES:
        if rest.startswith(namespace + "_"):
            namespaces.append(namespace)
            rest = rest[len(namespace) + 1 :]
            break
    return namespaces, rest


def trace_name_of(public: str) -> str:
    """`linalg_norm` -> `linalg::Norm`: the C++ type named in trace lines."""
    namespaces, stem = op_namespace_parts(public)
    return "::".join([*namespaces, class_name_of(stem)])


def load_aten_op_names(source_dir: Path) -> list[str]:
    """The ATen list as public operator names (`add_` -> `add`, `_x` ->
    `internal_x`): operators whose generated slot-8 implementation is built.

    Read from `scripts/torch_ops.yaml` (docs/behaviour.md, "ATen operator list"), else
    from the older `scripts/torch_ops.txt` (one name per line, `#` comments); empty
    without.
    """
    path = source_dir / TORCH_OPS_FILE
    if path.is_file():
        names = load_torch_op_list(path)
    else:
        path = source_dir / LEGACY_TORCH_OPS_FILE
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
