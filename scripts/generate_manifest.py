"""Write the build manifest: which operators, implementations and devices a build has.

CMake runs this at configure time with the resolved options; the package reads
the result (`infini/ops/_generated/manifest.json`) to build its public surface.
The work is done in one direction by the modules beside this one: the schema
(`build_model`, from `infini.ops.core`), the scan of the sources
(`source_scan`), the selection (`selection`) and, under
`--with-torch`, the ATen metadata (`generate_torch_ops`); this module writes
the result. Errors print ``<path>: <message>`` on stderr and exit with 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from build_model import (
    BASE_DIRECTORY,
    MANIFEST_FORMAT_VERSION,
    PLATFORMS,
    TORCH_METADATA_NAME,
    BuildConfiguration,
    ManifestError,
    class_name_of,
    split_names,
    write_json,
)
from generate_torch_ops import run
from ops_config import OpsConfigError
from resolve_linked import resolve as resolve_linked
from selection import (
    SMOKE_TORCH_OPS,
    aten_names_to_generate,
    generated_aten_operators,
    select_implementations,
    smoke_ops,
)
from source_scan import scan_bases, scan_implementations


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

    # Linked providers (`WITH_LINKED`) are checked against the installed
    # libraries here, so a missing or mismatched provider fails the configure.
    linked = None
    if configuration.with_linked:
        linked = resolve_linked(
            source_dir,
            configuration.devices,
            [i for impls in selected.values() for i in impls],
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

    manifest = {
        "format_version": MANIFEST_FORMAT_VERSION,
        "package_version": configuration.package_version,
        "options": options,
        "devices": list(configuration.devices),
        "backends": configuration.backends,
        "python_bindings": configuration.python_bindings,
        "operators": operators,
        "instantiations": instantiations,
    }
    if linked is not None:
        manifest["linked"] = linked
    return manifest


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """Write `manifest` atomically, leaving the file untouched when unchanged."""
    write_json(path, manifest)


def generate_aten_metadata(
    source_dir: Path, configuration: BuildConfiguration, directory: Path, log=None
) -> Path:
    """Run the ATen generator for the selected operators (this interpreter
    must import torch); returns the metadata path (in `directory`)."""
    names, optional = aten_names_to_generate(source_dir, configuration)
    path = directory / TORCH_METADATA_NAME
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
        if "linked" in manifest:
            write_json(
                arguments.output.parent / "linked" / "resolved.json", manifest["linked"]
            )
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
