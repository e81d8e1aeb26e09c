"""Host time of a cached slot-8 (ATen) call against the bare torch call.

`infini.ops.abs(x, out)` (slot 8, the only one `abs` has) and
`torch.abs(x, out=out)` on the same (13, 4) float32 CPU tensors, alternating
in rounds; the figure is the minimum over rounds of the mean time per call
(the machine is shared and noisy). The issue's budget is 3 µs above torch.

    python benchmarks/aten_host_overhead.py [--rounds 30] [--calls 20000] [--write]
"""

from __future__ import annotations

import argparse
import platform
from datetime import date
from pathlib import Path

from benchmarks.host_overhead import import_time, time_calls

RESULTS = Path(__file__).resolve().parent / "results" / "aten_host_overhead.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--write", action="store_true", help=f"append to {RESULTS}")
    options = parser.parse_args()

    import torch

    import infini.ops

    if 8 not in infini.ops.Abs.active_implementation_indices("cpu"):
        raise SystemExit("this build has no ATen `abs` (slot 8): build WITH_TORCH")
    torch.set_num_threads(1)
    x, out = torch.randn(13, 4), torch.empty(13, 4)
    cases = {
        "ours": lambda: infini.ops.abs(x, out),
        "torch": lambda: torch.abs(x, out=out),
    }
    for function in cases.values():
        time_calls(function, 2000)
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(options.rounds):
        for name, function in cases.items():
            best[name] = min(best[name], time_calls(function, options.calls))
    imported = import_time()
    operators = sum(
        8 in getattr(infini.ops, name).active_implementation_indices("cpu")
        for name in dir(infini.ops)
        if hasattr(getattr(infini.ops, name), "active_implementation_indices")
    )

    ours, theirs = best["ours"], best["torch"]
    lines = [
        f"## {date.today()} on {platform.machine()}",
        "",
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"infini.ops {infini.ops.__version__}, {operators} operators with slot 8; "
        f"{options.rounds} rounds x {options.calls} calls, minimum per-call mean.",
        "",
        "| call | µs per call |",
        "|---|---|",
        f"| `infini.ops.abs` (13, 4) fp32, slot 8, cached | {ours * 1e6:.2f} |",
        f"| `torch.abs(..., out=)` (13, 4) fp32 | {theirs * 1e6:.2f} |",
        f"| overhead ours - torch (budget 3) | {(ours - theirs) * 1e6:.2f} |",
        f"| `import infini.ops` after `import torch` (ms) | {imported * 1e3:.1f} |",
        "",
    ]
    print("\n".join(lines))
    if options.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
