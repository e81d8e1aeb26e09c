"""`python -m infini.ops info | precompile`.

- `info` prints what the build contains: version, devices, backends, options,
  and every operator with its active slots per device.
- `precompile` compiles (into the kernel cache) the kernels of every
  (operator, device, slot) instantiation that the build manifest lists, that
  is, of builds configured with `GENERATE_OPERATOR_CALL_INSTANTIATIONS=ON`;
  first calls then load kernels instead of compiling them. `--models` limits
  it to the operators `infini.ops.models` calls (what `pip install` compiles
  by default, `INFINI_OPS_PRECOMPILE` in the README). Operators compile in
  parallel processes (`--jobs`, default every CPU; `infini.ops.core.precompile`).

Errors are one line on stderr with exit status 2 (usage) or 1 (runtime),
a traceback only with `--debug` (`infini.ops.core.cli`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from infini.ops.core.cli import ArgumentParser, run


def info() -> int:
    from infini.ops.core.manifest import MANIFEST_PATH, load_manifest

    manifest = load_manifest()
    print(
        f"InfiniOps {manifest.get('package_version')} "
        f"({Path(__file__).resolve().parent}, manifest {MANIFEST_PATH})"
    )
    print(f"devices: {', '.join(manifest['devices'])}")
    backends = [name for name, on in manifest.get("backends", {}).items() if on]
    print(f"backends: {', '.join(backends)}")
    print(
        f"python bindings: {'on' if manifest.get('python_bindings', True) else 'off'}"
    )
    print(f"compiled-ahead instantiations: {len(manifest.get('instantiations', []))}")
    options = manifest.get("options", {})
    if options:
        print("options:")
        for name, value in options.items():
            print(f"  {name} = {value}")
    print(f"operators ({len(manifest['operators'])}):")
    for name, operator in sorted(manifest["operators"].items()):
        slots: dict[str, list[int]] = {}
        for implementation in operator["implementations"]:
            for device in implementation["devices"]:
                slots.setdefault(device, []).append(implementation["slot"])
        described = "; ".join(f"{d} {sorted(s)}" for d, s in sorted(slots.items()))
        print(f"  {name} ({operator['class']}): {described}")
    linked = manifest.get("linked")
    if linked:
        print(f"linked libraries ({len(linked['libraries'])}):")
        for library in linked["libraries"]:
            print(
                f"  {library['device']}/{library['name']} ({library['transport']}): "
                f"{library['package']} {library['version']}, {library['path']}"
            )
        print(f"linked bindings ({len(linked['bindings'])}):")
        for binding in linked["bindings"]:
            print(
                f"  {binding['operator']} on {binding['device']} at slot "
                f"{binding['slot']}: {binding['library']} ({binding['transport']})"
            )
    return 0


def precompile(selected: list[str], jobs: int | None = None) -> int:
    from infini.ops.core.manifest import load_manifest
    from infini.ops.core.precompile import precompile_instantiations

    instantiations = load_manifest().get("instantiations", [])
    if not instantiations:
        print(
            "this build lists no kernel instantiations "
            "(GENERATE_OPERATOR_CALL_INSTANTIATIONS=OFF): kernels compile on first use"
        )
        return 0
    return precompile_instantiations(instantiations, selected, jobs)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m infini.ops")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="print what this build contains")
    compile_parser = commands.add_parser(
        "precompile", help="compile the kernels the build lists ahead of first use"
    )
    compile_parser.add_argument("operators", nargs="*", help="only these operators")
    compile_parser.add_argument(
        "--models",
        action="store_true",
        help="the operators of `infini.ops.models` (with any operators named)",
    )
    compile_parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        help="worker processes, one operator at a time each "
        "(default: every CPU this process may use)",
    )
    options = parser.parse_args(argv)
    if options.command == "info":
        return info()
    selected = list(options.operators)
    if options.models:
        from infini.ops.models import OPERATORS

        selected += OPERATORS
    if options.jobs is not None and options.jobs < 1:
        compile_parser.error(f"--jobs must be at least 1, got {options.jobs}")
    return precompile(selected, options.jobs)


if __name__ == "__main__":
    sys.exit(run(main, prog="python -m infini.ops"))
