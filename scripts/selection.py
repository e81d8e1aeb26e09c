"""Select what a build contains: the active implementations of each operator.

Selection follows docs/behaviour.md, "Selection rules": an `ops.json` config
(`--ops-config`) acts as an allowlist of operators and slots, then the inline allowlist
(`--ops`, or the smoke list under `--smoke`) filters the result, warning about names
that are not available. The generated ATen slot is selected from the ATen list, the
config and `INFINI_OPS_TORCH_OPS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aten_names import (
    TORCH_OPS_FILE,
    aten_names_of,
    load_aten_op_names,
    load_torch_op_list,
    public_op_name,
)
from build_model import (
    BASE_DIRECTORY,
    GENERATED_ATEN_CLASS_PREFIX,
    GENERATED_ATEN_MODULE,
    GENERATED_ATEN_SLOT,
    PACKAGE_DIRECTORY,
    Base,
    BuildConfiguration,
    Implementation,
    ManifestError,
)
from ops_config import (
    OpsConfigError,
    header_path,
    implementation_slot,
    load_ops_config,
    torch_op_names,
)
from source_scan import read_module_implementations

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


def aten_op_selection(source_dir: Path, configuration: BuildConfiguration) -> set[str]:
    """Public names that get the generated ATen slot (docs/behaviour.md, "Selection
    rules"): the ATen list, or what an `ops.json` selects for slot 8, then intersected
    with the `INFINI_OPS_TORCH_OPS` allowlist (the smoke set in a smoke build)."""
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
                module=GENERATED_ATEN_MODULE,
                overloads=tuple(info["overloads"]),
                docstring=f"PyTorch's `{op}` (generated from the ATen schema).",
                path=path,
            )
        if op not in bases:
            continue
        implementations.append(
            Implementation(
                operator=op,
                slot=GENERATED_ATEN_SLOT,
                backend="torch",
                module=GENERATED_ATEN_MODULE,
                class_name=GENERATED_ATEN_CLASS_PREFIX + info["class"],
                devices="all",
                path=path,
            )
        )
    return implementations


def smoke_ops(devices: Sequence[str], with_torch: bool) -> list[str]:
    """The operator allowlist of a smoke build (docs/behaviour.md, "Smoke builds")."""
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
    """The active implementations of each selected operator (docs/behaviour.md,
    "Selection rules")."""
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
            and implementation.slot == GENERATED_ATEN_SLOT
            and implementation.module == GENERATED_ATEN_MODULE
            and implementation.operator not in aten_ops
        ):
            continue
        active = _active(implementation, configuration)
        if active is not None:
            available.setdefault(active.operator, []).append(active)
    _check_unique_slots(i for impls in available.values() for i in impls)

    if config is None:
        # Every operator with a base is in the default selection, even where
        # no enabled device implements it: the build still has its function
        # and class (active slots `[]`, a call names operator and device),
        # as the original binds every base header.
        selected = dict(available)
        for op in bases:
            selected.setdefault(op, [])
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
        selected = {
            op: impls for op, impls in selected.items() if op in allowlist and impls
        }
    elif config is None:
        unavailable = []
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
        if impls or (config is None and allowlist is None)
    }


def aten_names_to_generate(
    source_dir: Path, configuration: BuildConfiguration
) -> tuple[list[str], list[str]]:
    """The ATen names the generator must read for this selection, and those
    of them that may be absent from torch (names an `ops.json` selects for
    slot 8 without the ATen list naming them: `x` and `x_` are both tried)."""
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
