"""Host time of a cached `infini.ops.add` call against `torch.add(..., out=)`.

Both run on the same (13, 4) float32 CPU tensors in one process, alternating
in rounds with the class form (`infini.ops.Add(x, y, out)` built once, then
called); the reported figure is the minimum over rounds of the mean time per
call (the machine is shared and noisy, so the minimum is the stable number).
Also measures `import infini.ops` after `import torch` in a fresh process,
and that plus building the surface (the first lookup of `infini.ops.add`).

    python benchmarks/host_overhead.py [--rounds 30] [--calls 20000] [--write]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "host_overhead.md"


def time_calls(function, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def import_time(repeats: int = 5, lookup: bool = False) -> float:
    code = (
        "import time, torch\n"
        "start = time.perf_counter()\n"
        "import infini.ops\n"
        + ("infini.ops.add\n" if lookup else "")
        + "print(time.perf_counter() - start)\n"
    )
    samples = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        samples.append(float(out.stdout.strip()))
    return min(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--write", action="store_true", help=f"append to {RESULTS}")
    options = parser.parse_args()

    import torch

    import infini.ops

    torch.set_num_threads(1)
    x, y, out = torch.randn(13, 4), torch.randn(13, 4), torch.empty(13, 4)
    add = infini.ops.Add(x, y, out)
    cases = {
        "infini.ops.add(x, y, out)": lambda: infini.ops.add(x, y, out),
        "add_object(x, y, out)": lambda: add(x, y, out),
        "torch.add(x, y, out=out)": lambda: torch.add(x, y, out=out),
    }
    for function in cases.values():
        time_calls(function, 2000)  # warm up (and compile)
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(options.rounds):
        for name, function in cases.items():
            best[name] = min(best[name], time_calls(function, options.calls))
    imported = import_time()
    surface = import_time(lookup=True)

    ours, theirs = best["infini.ops.add(x, y, out)"], best["torch.add(x, y, out=out)"]
    objects = best["add_object(x, y, out)"]
    lines = [
        f"## {date.today()} on {platform.machine()}",
        "",
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"infini.ops {infini.ops.__version__}; {options.rounds} rounds x "
        f"{options.calls} calls, minimum per-call mean.",
        "",
        "| call | µs per call |",
        "|---|---|",
        f"| `infini.ops.add` (13, 4) fp32, cached | {ours * 1e6:.2f} |",
        f"| `Add` object called, (13, 4) fp32 | {objects * 1e6:.2f} |",
        f"| `torch.add(..., out=)` (13, 4) fp32 | {theirs * 1e6:.2f} |",
        f"| ratio ours / torch | {ours / theirs:.2f} |",
        f"| `import infini.ops` after `import torch` (ms) | {imported * 1e3:.1f} |",
        f"| the same, then the first `infini.ops.add` (ms) | {surface * 1e3:.1f} |",
        "",
    ]
    print("\n".join(lines))
    if options.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
