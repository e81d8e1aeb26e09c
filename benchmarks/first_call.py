"""First-call latency of every CPU operator: cold, cached, and precompiled.

Issue 3 asks for no compilation at call time for dtypes whose kernels were
compiled ahead (`python -m infini.ops precompile`), at most 2 s for any other
first call, and kernels cached on disk that survive a new process. For each
CPU operator with a module in `benchmarks/ops/`, at that module's smallest
shape, this runs, each in a fresh Python process:

1. cold: the first call of each dtype with an empty kernel cache
   (`INFINI_OPS_CACHE_DIR` pointed at a new directory; one per dtype, so no
   dtype profits from another's compilation);
2. cached: the first call again in a new process reusing that cache (must
   compile nothing);
3. precompiled: `python -m infini.ops precompile <op>` into another empty
   cache, then the first call of every dtype in a new process.

Each first call is timed on its own, after `import infini.ops`, Numba and
the CPU backend's JIT module, and after Numba's registries are filled: that
start-up is paid once per process whatever the operator, cached or not, and
is reported apart. The Numba functions compiled during the call are counted
(Numba's `numba:compile` events; loading from the disk cache is not a
compilation).

    python benchmarks/first_call.py [--ops add,rms_norm] [--dtypes float32]
        [--tokens 512] [--save rows.jsonl] [--load rows.jsonl] [--write]

`--tokens` measures at the first of those token counts that the benchmark
module has a case for instead of the smallest (for instance, 512 reaches the
parallel kernels, which a hook must have compiled too).

`--write` replaces `benchmarks/results/first_call.md`. The run takes a while
(eight processes per operator, each importing torch): `--save` appends each
operator's measurements to a file as they come, and `--load` writes the
table from such a file without measuring.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "first_call.md"
OPS_DIRECTORY = ROOT / "benchmarks" / "ops"
DTYPE_NAMES = ("float32", "float16", "bfloat16")
# Token counts tried in order; the first that the operator's benchmark module
# has a case for is the "small shape".
SMALL_TOKENS = (1, 16, 512, 2048)
# Issue 3's bound on a first call that was not compiled ahead.
COLD_LIMIT_SECONDS = 2.0
WORKER_TIMEOUT_SECONDS = 600


# -- the worker (runs in the fresh process) ----------------------------------


def worker(operator: str, dtypes: list[str], token_counts=SMALL_TOKENS) -> None:
    """Prints one JSON object: the import times and, per dtype, the first
    call's seconds and compile count (or why there is no call)."""
    import torch

    sys.path.insert(0, str(ROOT))
    start = time.perf_counter()
    import infini.ops  # noqa: F401

    import_ops = time.perf_counter() - start
    start = time.perf_counter()
    import numba  # noqa: F401
    from numba.core import event

    import infini.ops.native.cpu.jit  # noqa: F401

    import_numba = time.perf_counter() - start
    # Numba's first use in a process, compiling or loading from the cache,
    # fills its typing and target registries (importing numba.np.arraymath,
    # SciPy's BLAS and numpy.f2py on the way): about a second here, paid
    # once per process whatever the operator, so it is measured apart.
    from numba.core.registry import cpu_target

    start = time.perf_counter()
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()
    initialise_numba = time.perf_counter() - start
    module = importlib.import_module(f"benchmarks.ops.{operator}")
    results = {}
    for name in dtypes:
        dtype = getattr(torch, name)
        case, tokens = None, None
        for tokens in token_counts:
            case = next(iter(module.cases(tokens, dtype)), None)
            if case is not None:
                break
        if case is None:
            results[name] = {"skipped": "no benchmark case for this dtype"}
            continue
        with event.install_recorder("numba:compile") as recorder:
            start = time.perf_counter()
            try:
                case.ours()
            except Exception as error:  # reported, not fatal
                results[name] = {"skipped": f"{type(error).__name__}: {error}"}
                continue
            seconds = time.perf_counter() - start
        compiles = sum(1 for _, item in recorder.buffer if item.is_start)
        start = time.perf_counter()
        case.ours()
        again = time.perf_counter() - start
        results[name] = {
            "seconds": seconds,
            "compiles": compiles,
            "second_call": again,
            "label": case.label,
            "tokens": tokens,
        }
    print(
        json.dumps(
            {
                "import_ops": import_ops,
                "import_numba": import_numba,
                "initialise_numba": initialise_numba,
                "calls": results,
            }
        )
    )


# -- the driver ----------------------------------------------------------------


def _environment(cache: Path) -> dict:
    environment = dict(os.environ)
    environment["INFINI_OPS_CACHE_DIR"] = str(cache)
    return environment


def run_worker(operator: str, dtypes: list[str], cache: Path, tokens=None) -> dict:
    command = [sys.executable, __file__, "--worker", operator]
    command += ["--dtypes", ",".join(dtypes)]
    if tokens:
        command += ["--tokens", ",".join(str(t) for t in tokens)]
    result = subprocess.run(
        command,
        env=_environment(cache),
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT_SECONDS,
        cwd=ROOT,
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        return {"error": tail[0] if tail else f"exit {result.returncode}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_precompile(operator: str, cache: Path) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "infini.ops", "precompile", operator],
        env=_environment(cache),
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT_SECONDS,
        cwd=ROOT,
    )
    seconds = time.perf_counter() - start
    output = (result.stdout + result.stderr).strip()
    return seconds, output.splitlines()[-1] if output else ""


def precompile_hooks() -> dict[str, bool]:
    """CPU operator -> whether its slot-0 implementation has a `precompile`
    hook (what `python -m infini.ops precompile` calls)."""
    from infini.ops.core.manifest import load_manifest

    hooks = {}
    for name, info in load_manifest()["operators"].items():
        for implementation in info["implementations"]:
            if "cpu" not in implementation["devices"]:
                continue
            if implementation["backend"] != "native":
                continue
            module = importlib.import_module(implementation["module"])
            cls = getattr(module, implementation["class"])
            hooks[name] = getattr(cls, "precompile", None) is not None
    return hooks


def benchmark_operators(requested) -> list[str]:
    import infini.ops

    names = sorted(
        p.stem
        for p in OPS_DIRECTORY.glob("*.py")
        if p.stem != "__init__" and not p.stem.startswith("_")
    )
    if requested:
        names = [n for n in names if n in requested]
    return [
        n
        for n in names
        if hasattr(infini.ops, n)
        and infini.ops._entries[n].active_implementation_indices("cpu")
    ]


def measure(operator: str, dtypes: list[str], scratch: Path, tokens=None) -> dict:
    row: dict = {"operator": operator, "cold": {}, "cached": {}, "imports": []}
    for name in dtypes:
        cache = scratch / f"{operator}-{name}"
        cold = run_worker(operator, [name], cache, tokens)
        cached = run_worker(operator, [name], cache, tokens)
        for phase, result in (("cold", cold), ("cached", cached)):
            if "error" in result:
                row[phase][name] = {"skipped": result["error"]}
            else:
                row[phase][name] = result["calls"][name]
                row["imports"].append(
                    result["import_numba"] + result["initialise_numba"]
                )
    cache = scratch / f"{operator}-precompiled"
    row["precompile_seconds"], row["precompile_output"] = run_precompile(
        operator, cache
    )
    precompiled = run_worker(operator, dtypes, cache, tokens)
    row["precompiled"] = (
        {name: {"skipped": precompiled["error"]} for name in dtypes}
        if "error" in precompiled
        else precompiled["calls"]
    )
    return row


def _cell(result: dict | None) -> str:
    if not result:
        return "-"
    if "skipped" in result:
        return "n/a"
    text = f"{result['seconds']:.2f}"
    if result["compiles"]:
        text += f" ({result['compiles']} compiled)"
    return text


def markdown(rows, dtypes, hooks, numba_import: float) -> str:
    import numba
    import torch

    import infini.ops

    slow = []
    for r in rows:
        seconds = [
            r["cold"][name]["seconds"]
            for name in dtypes
            if "seconds" in r["cold"].get(name, {})
        ]
        if seconds and max(seconds) > COLD_LIMIT_SECONDS:
            span = f"{min(seconds):.1f}-{max(seconds):.1f}"
            if len(seconds) == 1 or f"{min(seconds):.1f}" == f"{max(seconds):.1f}":
                span = f"{max(seconds):.1f}"
            slow.append(f"`{r['operator']}` ({span} s)")
    recompiled = [
        f"{r['operator']} {name}"
        for r in rows
        for name in dtypes
        if r["cached"].get(name, {}).get("compiles")
    ]
    after = [
        f"{r['operator']} {name}"
        for r in rows
        for name in dtypes
        if r["precompiled"].get(name, {}).get("compiles") and hooks.get(r["operator"])
    ]
    without_hook = sorted(name for name, has in hooks.items() if not has)
    partial = [r for r in rows if len(r["cold"]) < len(dtypes)]
    lines = [
        "# First-call latency of the CPU operators",
        "",
        f"{date.today()}; {platform.machine()}, {os.cpu_count()} logical CPUs; "
        f"Python {platform.python_version()}, torch {torch.__version__}, numba "
        f"{numba.__version__}, infini.ops {infini.ops.__version__}. Written by "
        "`python benchmarks/first_call.py --write`.",
        "",
        "Seconds of the first call of each operator at its benchmark's smallest "
        "shape, each column in a fresh process: **cold** with an empty kernel "
        "cache (`INFINI_OPS_CACHE_DIR` pointed at a new directory per dtype), "
        "**cached** in a new process reusing that cache, **precompiled** in a "
        "new process after `python -m infini.ops precompile <op>` filled "
        "another empty cache. `(n compiled)`: Numba functions compiled during "
        "the call (loading from the disk cache does not count). Not included: "
        "`import numba` and the first use of Numba in the process (filling its "
        "typing and target registries, which imports `numba.np.arraymath`, "
        f"SciPy's BLAS and `numpy.f2py`), together {numba_import:.2f} s "
        "(median), paid once per process by the first CPU call of any "
        "operator, cached or not.",
        *(
            [
                "",
                "Operators measured in fewer dtypes (a shorter run with "
                "`--dtypes`): "
                + ", ".join(f"`{r['operator']}`" for r in partial)
                + ". Most kernels take the dtype as a run-time code or compile "
                "one specialisation per dtype of the same size, so the cold "
                "time of one dtype stands for the others.",
            ]
            if partial
            else []
        ),
        "",
        "## Targets",
        "",
        f"- Operators with a cold first call above {COLD_LIMIT_SECONDS:.0f} s "
        "(range over dtypes): " + (", ".join(slow) or "none") + ".",
        "- Cached first calls that compiled anything (must be none): "
        + (", ".join(recompiled) or "none")
        + ".",
        "- First calls that compiled after `precompile` although the operator "
        "has a hook: " + (", ".join(after) or "none") + ".",
        "- CPU operators without a `precompile` hook (their kernels compile on "
        "first use even after `precompile`): "
        + (", ".join(f"`{n}`" for n in without_hook) or "none")
        + ".",
        "",
        "## Per operator",
        "",
        "| operator | dtype | shape | cold (s) | cached (s) | precompiled (s) "
        "| `precompile` |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        hook = hooks.get(r["operator"])
        precompile = "no hook"
        if hook:
            seconds = r.get("precompile_seconds")
            precompile = "-" if seconds is None else f"{seconds:.1f} s"
        for name in dtypes:
            if name not in r["cold"]:
                continue  # not measured in this run (`--dtypes`)
            cold = r["cold"][name]
            label = cold.get("label", "")
            lines.append(
                f"| `{r['operator']}` | {name} | {label} | {_cell(cold)} | "
                f"{_cell(r['cached'].get(name))} | "
                f"{_cell(r['precompiled'].get(name))} | {precompile} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated operator names")
    parser.add_argument("--dtypes", help="comma-separated dtype names")
    parser.add_argument("--tokens", help="comma-separated token counts to try")
    parser.add_argument("--write", action="store_true", help=f"replace {RESULTS}")
    parser.add_argument("--save", type=Path, help="append measured rows (JSON lines)")
    parser.add_argument("--load", type=Path, help="table from saved rows only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args()
    dtypes = options.dtypes.split(",") if options.dtypes else list(DTYPE_NAMES)
    tokens = [int(t) for t in options.tokens.split(",")] if options.tokens else None
    if options.worker:
        worker(options.worker, dtypes, tokens or SMALL_TOKENS)
        return

    sys.path.insert(0, str(ROOT))
    requested = set(options.ops.split(",")) if options.ops else None
    operators = benchmark_operators(requested)
    hooks = precompile_hooks()
    rows = []
    if options.load:
        lines = options.load.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        rows = [r for r in rows if r["operator"] in operators]
        operators = []
    with tempfile.TemporaryDirectory(prefix="infiniops-first-call-") as scratch:
        for operator in operators:
            row = measure(operator, dtypes, Path(scratch), tokens)
            rows.append(row)
            if options.save:
                with options.save.open("a", encoding="utf-8") as saved:
                    saved.write(json.dumps(row) + "\n")
            cells = "  ".join(
                f"{name}: cold {_cell(row['cold'].get(name))}, cached "
                f"{_cell(row['cached'].get(name))}, precompiled "
                f"{_cell(row['precompiled'].get(name))}"
                for name in dtypes
            )
            print(f"{operator:34} {cells}", flush=True)
    imports = [t for r in rows for t in r["imports"]]
    text = markdown(rows, dtypes, hooks, statistics.median(imports) if imports else 0)
    print(text)
    if options.write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text, encoding="utf-8")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
