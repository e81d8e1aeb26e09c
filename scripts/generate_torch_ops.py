"""Generate the ATen backend metadata (`torch_ops_metadata.json`, slot 8).

For every name of `scripts/torch_ops.yaml` (docs/behaviour.md, "ATen backend") this
reads the installed torch's own `native_functions.yaml` through `torchgen` (no network),
keeps the usable `out` (and in-place) schemas, maps them to InfiniOps overloads and
writes the metadata the package builds its slot-8 operators from at import time; no
per-operator source is generated.

- Types map as in docs/behaviour.md, "ATen schemas and types"; `Generator?`,
  `Layout?`, `Device?` and `MemoryFormat?` are hidden (passed to ATen as
  `None`), `self` is renamed `input`, outputs come last.
- A schema is kept when all its visible types are supported and it is
  testable (an output, and a tensor or tensor list first); overloads whose
  visible type sequence collides are de-duplicated (the unsuffixed `out` wins,
  then the one hiding fewer parameters).
- In-place names (`x_`) give overloads of `x`: implicit (mutating `input`) when
  the operator's out variants already cover that type sequence, otherwise an
  explicit `out` (copy `input` to `out`, then run in place on `out`).
- When `src/infini/ops/base/<name>.py` exists, its overloads are bound to ATen
  schemas by parameter name instead (`bind_base_overload`).

Every skipped name is printed with its reason. The package finds the metadata
inside `infini/ops/` (installed) or beside the `INFINI_OPS_MANIFEST` file.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aten_names import (
    aten_names_of,
    load_torch_op_list,
    public_op_name,
    trace_name_of,
)
from build_model import (
    TORCH_METADATA_FORMAT_VERSION,
    TORCH_METADATA_NAME,
    Base,
    BuildConfiguration,
    ManifestError,
    class_name_of,
    parse_overload,
    split_names,
    write_json,
)
from ops_config import OpsConfigError
from selection import aten_names_to_generate
from source_scan import scan_bases

__all__ = [
    "aten_names_of",
    "generate",
    "load_native_functions",
    "load_torch_op_list",
    "public_op_name",
    "read_hand_written_bases",
    "run",
    "trace_name_of",
    "write_metadata",
]

HIDDEN_TYPES = ("Generator", "Layout", "Device", "MemoryFormat")

SKIP_NOT_TESTABLE = "no testable tensor input/output pair"
SKIP_TENSOR_LIST_OUTPUT = "`Tensor(a!)[]` outputs"


# -- types --------------------------------------------------------------------

_SCALAR_TYPES = {
    "Tensor": "Tensor",
    "Scalar": "float",
    "float": "float",
    "int": "int",
    "SymInt": "int",
    "bool": "bool",
    "str": "str",
    "ScalarType": "dtype",
}
_OPTIONAL_SCALARS = ("Scalar", "int", "SymInt", "bool", "float", "str", "ScalarType")


def map_type(aten_type: str) -> str | None:
    """The InfiniOps type of an ATen type string (without alias annotation),
    "" for hidden types, None when unsupported."""
    optional = aten_type.endswith("?")
    core = aten_type[:-1] if optional else aten_type
    if optional and core in HIDDEN_TYPES:
        return ""
    if core == "Tensor":
        return "Tensor|None" if optional else "Tensor"
    if core == "Tensor[]" and not optional:
        return "list[Tensor]"
    if core == "Tensor?[]" and not optional:
        return "list[Tensor|None]"
    if re.fullmatch(r"(int|SymInt)\[\d*\]", core):
        return "list[int]|None" if optional else "list[int]"
    if re.fullmatch(r"float\[\d*\]", core) and optional:
        return "list[float]|None"
    if core in _SCALAR_TYPES and core != "Tensor":
        if optional:
            return _SCALAR_TYPES[core] + "|None" if core in _OPTIONAL_SCALARS else None
        return _SCALAR_TYPES[core]
    return None


def _aten_type_text(argument) -> str:
    """The schema's type text of a torchgen `Argument`, with its annotation."""
    text = str(argument.type)
    if argument.annotation is not None:
        text = text.replace("Tensor", f"Tensor({argument.annotation})", 1)
    return text


# -- schemas ------------------------------------------------------------------


@dataclass
class Param:
    name: str
    aten_type: str
    type: str  # InfiniOps type: Tensor, float, list[int]|None, ...
    is_tensor: bool
    is_out: bool
    writes: bool
    schema_index: int | None
    has_default: bool

    @property
    def optional(self) -> bool:
        return self.type.endswith("|None") or self.type == "list[Tensor|None]"

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.aten_type,
            "is_tensor": self.is_tensor,
            "is_out": self.is_out,
            "schema_index": self.schema_index,
        }

    def text(self) -> str:
        return f"{self.name}: {self.type}{'!' if self.writes else ''}"


@dataclass
class Schema:
    """One usable ATen schema, its visible parameters in public order."""

    aten_name: str
    overload_name: str
    form: str  # "out", "inplace" (implicit) or "inplace_out" (explicit out)
    params: list[Param]
    hidden: int  # parameters not exposed (hidden types)
    order: int  # position in native_functions.yaml
    public: str = ""

    @property
    def type_key(self) -> tuple[str, ...]:
        return tuple(p.type for p in self.params)

    @property
    def canonical(self) -> bool:
        return self.overload_name in ("", "out")

    def overload_text(self) -> str:
        return ", ".join(p.text() for p in self.params)

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.public,
            "aten_name": self.aten_name,
            "overload_name": self.overload_name,
            "form": self.form,
            "params": [p.metadata() for p in self.params],
        }

    def with_explicit_out(self) -> Schema:
        params = [
            Param(
                p.name,
                p.aten_type,
                p.type,
                p.is_tensor,
                False,
                False,
                p.schema_index,
                p.has_default,
            )
            for p in self.params
        ]
        params.append(
            Param("out", "Tensor(a!)", "Tensor", True, True, True, None, False)
        )
        return Schema(
            self.aten_name,
            self.overload_name,
            "inplace_out",
            params,
            self.hidden,
            self.order,
            self.public,
        )


def _build_schema(
    function, order: int, tensor_slots: frozenset[int] = frozenset()
) -> tuple[Schema | None, str | None]:
    """A `Schema` from a torchgen `NativeFunction`, or (None, reason).

    `tensor_slots` are positional indices where a sibling overload takes a
    tensor: a `Scalar` there sorts with the tensors, so that `value: float`
    and `value: Tensor` overloads keep one parameter order.
    """
    func = function.func
    aten_name = str(func.name.name)
    arguments = func.arguments
    out_names = {a.name for a in arguments.out}
    inplace = func.name.name.inplace
    params: list[Param] = []
    hidden = 0
    for index, argument in enumerate(arguments.flat_all):
        aten_type = _aten_type_text(argument)
        if argument.name in out_names and str(argument.type) == "Tensor[]":
            return None, SKIP_TENSOR_LIST_OUTPUT
        mapped = map_type(str(argument.type))
        if mapped is None:
            return None, f"unsupported type `{argument.type}` of `{argument.name}`"
        if mapped == "":
            hidden += 1
            continue
        is_out = argument.name in out_names
        writes = argument.is_write
        name = "input" if argument.name == "self" else argument.name
        params.append(
            Param(
                name,
                aten_type,
                mapped,
                mapped.startswith("Tensor") or mapped.startswith("list[Tensor"),
                is_out,
                writes,
                index,
                argument.default is not None,
            )
        )
    # Within the positional and the keyword-only groups, tensors come first
    # (as in the original's bases); outputs last, each in schema order.
    positional = len(arguments.flat_positional)
    # Testability is judged in schema order (a `Scalar self` overload is not).
    visible_inputs = [p for p in params if not p.is_out]
    if not visible_inputs or visible_inputs[0].type not in ("Tensor", "list[Tensor]"):
        return None, SKIP_NOT_TESTABLE
    params.sort(
        key=lambda p: (
            p.is_out,
            p.schema_index >= positional,
            not (p.is_tensor or p.schema_index in tensor_slots),
        )
    )
    inputs = [p for p in params if not p.is_out]
    outputs = [p for p in params if p.is_out]
    first = inputs[0] if inputs else None
    if first is None or first.type not in ("Tensor", "list[Tensor]"):
        return None, SKIP_NOT_TESTABLE
    if inplace:
        if not first.writes:
            return None, SKIP_NOT_TESTABLE
        form = "inplace"
    else:
        if not outputs and not any(p.writes for p in params):
            return None, SKIP_NOT_TESTABLE
        form = "out"
    return (
        Schema(aten_name, func.name.overload_name, form, params, hidden, order),
        None,
    )


def load_native_functions(native_yaml: Path | None = None) -> list:
    """The installed torch's native functions, `autogen` expansions included."""
    from torchgen.gen import parse_native_yaml

    if native_yaml is None:
        import torchgen

        native_yaml = (
            Path(torchgen.__file__).parent
            / "packaged"
            / "ATen"
            / "native"
            / "native_functions.yaml"
        )
    tags = native_yaml.with_name("tags.yaml")
    return list(parse_native_yaml(str(native_yaml), str(tags)).native_functions)


def collect_schemas(
    aten_name: str, functions_by_name: Mapping[str, list]
) -> tuple[list[Schema], list[str]]:
    """The usable out/in-place schemas of one ATen name (bare `.out` first),
    and the reasons the others were dropped."""
    candidates = []
    for order, function in functions_by_name.get(aten_name, []):
        func = function.func
        if func.name.name.inplace:
            candidates.append((order, function))
        elif func.arguments.out:
            candidates.append((order, function))
    candidates.sort(key=lambda item: (item[1].func.name.overload_name != "out",))
    tensor_slots = frozenset(
        index
        for _, function in functions_by_name.get(aten_name, [])
        for index, argument in enumerate(function.func.arguments.flat_positional)
        if str(argument.type) == "Tensor"
    )
    schemas, reasons = [], []
    for order, function in candidates:
        schema, reason = _build_schema(function, order, tensor_slots)
        if schema is None:
            reasons.append(reason)
        else:
            schemas.append(schema)
    return schemas, reasons


def deduplicate(schemas: Iterable[Schema]) -> list[Schema]:
    """One schema per visible type sequence: the unsuffixed `out` wins, then
    the one hiding fewer parameters, then the earlier one."""
    best: dict[tuple[str, ...], Schema] = {}
    order: list[tuple[str, ...]] = []
    for schema in schemas:
        key = tuple(t.replace("|None", "?") for t in schema.type_key)
        current = best.get(key)
        if current is None:
            best[key] = schema
            order.append(key)
        elif (not current.canonical, current.hidden) > (
            not schema.canonical,
            schema.hidden,
        ):
            best[key] = schema
    return [best[key] for key in order]


def binding_order(overloads: Sequence[Schema]) -> list[Schema]:
    """Binding order (docs/behaviour.md, "Overload binding"): fewer tensor-like
    parameters first, then more parameters; stable otherwise."""
    return sorted(
        overloads,
        key=lambda s: (sum(p.is_tensor for p in s.params), -len(s.params)),
    )


# -- hand-written bases ------------------------------------------------------

_COMPATIBLE = {"int": ("int",), "float": ("float", "int"), "bool": ("bool",)}


def _compatible(base_type: str, aten_type: str) -> bool:
    base_core = base_type.removesuffix("|None")
    aten_core = aten_type.removesuffix("|None")
    if base_type.endswith("|None") and not aten_type.endswith("|None"):
        if base_core not in ("Tensor",):
            return False
    if base_core == aten_core:
        return True
    return aten_core in _COMPATIBLE.get(base_core, ())


def bind_base_overload(
    base_params: Sequence[tuple[str, str, bool]], schemas: Sequence[Schema]
) -> tuple[Schema, int] | None:
    """The ATen schema a hand-written base overload calls, and its form.

    `base_params` are ``(name, type, writes)``. Parameters bind by name; every
    base parameter must exist with a compatible type, and every ATen parameter
    the base lacks must be optional or defaulted. In-place schemas bind in
    their explicit-out form when the base overload ends in `out`. The match
    hiding the fewest parameters wins. Returns (schema, hidden count) or None.
    """
    best: tuple[int, int, Schema] | None = None
    names = [name for name, _, _ in base_params]
    for position, schema in enumerate(schemas):
        candidate = schema
        if (
            schema.form == "inplace"
            and names
            and names[-1] == "out"
            and not any(p.name == "out" for p in schema.params)
        ):
            candidate = schema.with_explicit_out()
        by_name = {p.name: p for p in candidate.params}
        if len(by_name) != len(candidate.params):
            continue
        if not all(
            name in by_name and _compatible(kind, by_name[name].type)
            for name, kind, _ in base_params
        ):
            continue
        missing = [p for p in candidate.params if p.name not in names]
        if any(p.is_out or not (p.optional or p.has_default) for p in missing):
            continue
        # The base writes exactly what ATen writes: its outputs, or `input`
        # for an implicit in-place schema.
        if any(
            by_name[name].is_out != writes and not (writes and by_name[name].writes)
            for name, _, writes in base_params
        ):
            continue
        score = (len(missing), position)
        if best is None or score < best[:2]:
            best = (*score, candidate)
    return None if best is None else (best[2], best[0])


# -- the generator ------------------------------------------------------------


@dataclass
class Result:
    """Everything the generator decided."""

    entries: list[Schema] = field(default_factory=list)
    operators: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def metadata(self, torch_version: str) -> dict[str, Any]:
        return {
            "format_version": TORCH_METADATA_FORMAT_VERSION,
            "torch_version": torch_version,
            "ops": [entry.metadata() for entry in self.entries],
            "operators": self.operators,
            "skipped": [{"name": n, "reason": r} for n, r in self.skipped],
        }


def _split_base_overload(text: str) -> list[tuple[str, str, bool]]:
    return [(p.name, p.type, p.writes) for p in parse_overload(text)]


def generate(
    aten_names: Sequence[str],
    functions: Sequence,
    bases: Mapping[str, Any] | None = None,
    optional_names: Iterable[str] = (),
) -> Result:
    """Metadata for `aten_names`; `bases` maps public names to hand-written
    bases (objects with `overloads`, `trace_name`, `module` and optionally
    `aten_overload_aliases`). Names in `optional_names` that torch does not
    have are dropped silently."""
    bases = bases or {}
    optional_names = set(optional_names)
    functions_by_name: dict[str, list] = {}
    for order, function in enumerate(functions):
        functions_by_name.setdefault(str(function.func.name.name), []).append(
            (order, function)
        )

    result = Result()
    by_public: dict[str, list[str]] = {}
    for aten_name in aten_names:
        by_public.setdefault(public_op_name(aten_name), []).append(aten_name)

    for public, names in by_public.items():
        schemas: list[Schema] = []
        reasons: list[str] = []
        for aten_name in names:
            found, dropped = collect_schemas(aten_name, functions_by_name)
            if not found and aten_name not in functions_by_name:
                if aten_name not in optional_names:
                    result.skipped.append((aten_name, "not in native_functions.yaml"))
                continue
            if not found:
                reason = dropped[0] if dropped else SKIP_NOT_TESTABLE
                if SKIP_TENSOR_LIST_OUTPUT in dropped:
                    reason = SKIP_TENSOR_LIST_OUTPUT
                elif any(r == SKIP_NOT_TESTABLE for r in dropped):
                    reason = SKIP_NOT_TESTABLE
                result.skipped.append((aten_name, reason))
                continue
            for schema in found:
                schema.public = public
            schemas += found
            reasons += dropped
        if not schemas:
            continue

        base = bases.get(public)
        if base is not None:
            _bind_base(result, public, base, schemas)
        else:
            _generated_operator(result, public, schemas)
    return result


def _generated_operator(result: Result, public: str, schemas: list[Schema]) -> None:
    out_keys = {
        tuple(p.type for p in s.params if not p.is_out)
        for s in schemas
        if s.form == "out"
    }
    overloads = []
    for schema in schemas:
        if schema.form == "inplace":
            key = tuple(p.type for p in schema.params)
            if key not in out_keys:
                schema = schema.with_explicit_out()
        overloads.append(schema)
    overloads = deduplicate(overloads)
    # Metadata keeps the collection order (the bare `.out` first), the public
    # overloads are in binding order.
    index = {id(schema): len(result.entries) + i for i, schema in enumerate(overloads)}
    result.entries += overloads
    overloads = binding_order(overloads)
    bindings = [index[id(schema)] for schema in overloads]
    result.operators[public] = {
        "class": class_name_of(public),
        "trace_name": trace_name_of(public),
        "base": None,
        "overloads": [s.overload_text() for s in overloads],
        "bindings": bindings,
    }


def _bind_base(result: Result, public: str, base, schemas: list[Schema]) -> None:
    aliases = dict(getattr(base, "aten_overload_aliases", None) or {})
    aliases = {int(k): int(v) for k, v in aliases.items()}
    bindings: list[int | None] = []
    unbound = []
    chosen: dict[tuple[str, str, str], int] = {}
    for index, text in enumerate(base.overloads):
        if index in aliases:
            bindings.append(None)
            continue
        match = bind_base_overload(_split_base_overload(text), schemas)
        if match is None:
            unbound.append(text)
            bindings.append(None)
            continue
        schema = match[0]
        key = (schema.aten_name, schema.overload_name, schema.form)
        if key not in chosen:
            chosen[key] = len(result.entries)
            result.entries.append(schema)
        bindings.append(chosen[key])
    for index, target in aliases.items():
        if not 0 <= target < len(bindings) or bindings[target] is None:
            unbound.append(base.overloads[index])
        else:
            bindings[index] = bindings[target]
    if unbound:
        listed = "; ".join(f"({text})" for text in unbound)
        result.warnings.append(
            f"warning: `{public}`: no ATen schema binds the base overload(s) "
            f"{listed}; the operator gets no slot 8"
        )
        result.skipped.append((public, "a base overload binds no ATen schema"))
        return
    result.operators[public] = {
        "class": class_name_of(public),
        "trace_name": base.trace_name,
        "base": base.module,
        "overloads": list(base.overloads),
        "bindings": bindings,
    }


def write_metadata(path: Path, metadata: Mapping[str, Any]) -> None:
    write_json(path, metadata)


def read_hand_written_bases(source_dir: Path) -> dict[str, Base]:
    """The bases of `src/infini/ops/base/`, as the manifest reads them.

    A base may declare ``aten_overload_aliases = {i: j}``: overload `i` calls
    the ATen schema of overload `j` after the base's `aten_arguments` hook maps
    its arguments (e.g. a legacy `reduction` string to ATen's integer).
    """
    return scan_bases(source_dir)


def run(
    source_dir: Path,
    output: Path,
    aten_names: Sequence[str],
    native_yaml: Path | None = None,
    log=print,
    optional_names: Iterable[str] = (),
) -> Result:
    """Generate and write the metadata for `aten_names` of the tree at
    `source_dir`; prints the skipped names and warnings with `log`."""
    import torch

    started = time.perf_counter()
    functions = load_native_functions(native_yaml)
    result = generate(
        aten_names, functions, read_hand_written_bases(source_dir), optional_names
    )
    write_metadata(output, result.metadata(torch.__version__))
    for warning in result.warnings:
        log(warning)
    for name, reason in result.skipped:
        log(f"skipped ATen operator `{name}`: {reason}")
    overload_count = len(result.entries)
    log(
        f"ATen operators: {len(result.operators)} public, {overload_count} overloads "
        f"({len(result.skipped)} skipped) from torch {torch.__version__} in "
        f"{time.perf_counter() - started:.1f} s"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True, help=TORCH_METADATA_NAME)
    parser.add_argument(
        "--ops",
        help="exactly these ATen names (comma/semicolon separated), instead of "
        "the selection below",
    )
    parser.add_argument("--ops-config", type=Path, help="an ops.json selection")
    parser.add_argument(
        "--torch-ops", help="INFINI_OPS_TORCH_OPS: allowlist of ATen names"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="default the allowlist to the smoke set"
    )
    parser.add_argument(
        "--pytorch-version", help="accepted for diagnostics; the schema is local"
    )
    arguments = parser.parse_args(argv)

    try:
        if arguments.ops is not None:
            names, optional = split_names(arguments.ops), []
        else:
            configuration = BuildConfiguration(
                with_torch=True,
                ops_config=arguments.ops_config,
                torch_ops=split_names(arguments.torch_ops) or None,
                smoke=arguments.smoke,
            )
            names, optional = aten_names_to_generate(
                arguments.source_dir, configuration
            )
        run(
            arguments.source_dir,
            arguments.output,
            names,
            optional_names=optional,
        )
    except (OSError, ValueError, ManifestError, OpsConfigError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
