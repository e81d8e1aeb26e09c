"""`python -m infini.ops info | precompile`.

- `info` prints what the build contains: version, devices, backends, options,
  and every operator with its active slots per device.
- `precompile` compiles (into the kernel cache) the kernels of every
  (operator, device, slot) instantiation that the build manifest lists, that
  is, of builds configured with `GENERATE_OPERATOR_CALL_INSTANTIATIONS=ON`;
  first calls then load kernels instead of compiling them. `--models` limits
  it to the operators `infini.ops.models` calls (what `pip install` compiles
  by default, `INFINI_OPS_PRECOMPILE` in the README).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path


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


def precompile(selected: list[str]) -> int:
    from infini.ops.core.manifest import load_manifest

    instantiations = load_manifest().get("instantiations", [])
    if not instantiations:
        print(
            "this build lists no kernel instantiations "
            "(GENERATE_OPERATOR_CALL_INSTANTIATIONS=OFF): kernels compile on first use"
        )
        return 0
    failures: list[str] = []
    for item in instantiations:
        if selected and item["operator"] not in selected:
            continue
        module = importlib.import_module(item["module"])
        classes = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and getattr(value, "implementation_slot", None) == item["slot"]
            and getattr(value, "name", None) == item["operator"]
        ]
        start = time.perf_counter()
        compiled = 0
        label = f"{item['operator']} on {item['device']} slot {item['slot']}"
        try:
            for cls in classes:
                hook = getattr(cls, "precompile", None)
                if hook is not None:
                    compiled += hook() or 0
        except Exception as error:  # noqa: BLE001 - reported, the others go on
            # One failing warm-up must not leave every later operator
            # uncompiled; the exit status still reports it.
            print(
                f"{label}: precompile failed: {type(error).__name__}: {error}",
                flush=True,
            )
            failures.append(label)
            continue
        if compiled:
            seconds = time.perf_counter() - start
            print(
                f"{label}: compiled by {compiled} warm-up calls in {seconds:.1f} s",
                flush=True,
            )
        else:
            print(f"{label}: compiles on first use", flush=True)
    if failures:
        print(f"precompile failed for {len(failures)}: {', '.join(failures)}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infini.ops")
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
    options = parser.parse_args(argv)
    if options.command == "info":
        return info()
    selected = list(options.operators)
    if options.models:
        from infini.ops.models import OPERATORS

        selected += OPERATORS
    return precompile(selected)


if __name__ == "__main__":
    sys.exit(main())
