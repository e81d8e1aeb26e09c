"""Every CPU operator against PyTorch eager, at decode and prefill shapes.

For each operator with a module in `benchmarks/ops/` and a function in the
installed `infini.ops`, each token count (1, 16, 512, 2048) and each dtype
(float32, float16, bfloat16), times our call and the PyTorch eager
equivalent on the same inputs in this process, with `torch.set_num_threads`
equal to Numba's thread count. Writes a markdown table (speed-up, GB/s next to
the machine's copy bandwidth) and a PNG of the speed-up per operator:

    python benchmarks/cpu_operators.py [--ops add,rms_norm] [--tokens 1,2048]
        [--dtypes float32] [--rounds 7] [--write] [--name cpu_operators]

`--write` replaces `benchmarks/results/<name>.{md,png}` (`cpu_operators` by
default; another name keeps a subset, such as issue 16's operators, apart).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import platform
import sys
import traceback
from datetime import date
from pathlib import Path

import numba
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import infini.ops  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    DTYPES,
    HIDDEN,
    LARGE_ELEMENTS,
    TOKENS,
    copy_bandwidth,
    time_pair,
)

RESULTS = Path(__file__).resolve().parent / "results"
OPS_DIRECTORY = Path(__file__).resolve().parent / "ops"
PREFILL_TOKENS = 512
# Matrix products: float32 must be within 0.9x of torch at 512 tokens; the
# 16-bit dtypes must be correct and the results say how fast they are.
PRODUCTS = ("gemm", "linear", "matmul")
PRODUCT_TOKENS = 512
PRODUCT_FLOOR = 0.9


def available_operators(requested):
    names = sorted(p.stem for p in OPS_DIRECTORY.glob("*.py") if p.stem != "__init__")
    if requested:
        names = [n for n in names if n in requested]
    return [n for n in names if hasattr(infini.ops, n)]


def short(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run(operators, tokens_list, dtypes, rounds):
    rows = []
    for name in operators:
        module = importlib.import_module(f"benchmarks.ops.{name}")
        for dtype in dtypes:
            for tokens in tokens_list:
                try:
                    cases = list(module.cases(tokens, dtype))
                except Exception:
                    print(f"{name} {short(dtype)} {tokens}: setup failed", flush=True)
                    traceback.print_exc()
                    continue
                for case in cases:
                    try:
                        timing = time_pair(case.ours, case.torch, rounds=rounds)
                    except Exception as error:
                        print(f"{name} {case.label}: {error}", flush=True)
                        continue
                    row = {
                        "operator": name,
                        "dtype": short(dtype),
                        "tokens": tokens,
                        "label": case.label,
                        "ours": timing.ours,
                        "torch": timing.torch,
                        "speedup": timing.speedup,
                        "gbps": case.bytes / timing.ours / 1e9 if case.bytes else None,
                        "elements": case.elements,
                        "fused": case.fused,
                        # Routing and sampling modules set MEMORY_BOUND = False:
                        # their GB/s is shown but not held to the copy rate.
                        "memory_bound": getattr(module, "MEMORY_BOUND", True),
                    }
                    rows.append(row)
                    print(
                        f"{name:34} {short(dtype):9} {case.label:40} "
                        f"ours {timing.ours * 1e6:10.1f} us  torch "
                        f"{timing.torch * 1e6:10.1f} us  x{timing.speedup:6.2f}"
                        + (f"  {row['gbps']:6.1f} GB/s" if row["gbps"] else ""),
                        flush=True,
                    )
    return rows


def geometric_mean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0


def summary(rows, bandwidth):
    """The issue's targets, checked on the measured rows."""
    lines = []
    overall = geometric_mean(r["speedup"] for r in rows)
    lines.append(f"- Geometric-mean speed-up over all rows: **{overall:.2f}x**.")
    fused_misses = [
        r
        for r in rows
        if r["fused"] and r["tokens"] >= PREFILL_TOKENS and r["speedup"] < 2
    ]
    lines.append(
        "- Fused operators at prefill shapes (>= 512 tokens) below 2x: "
        + (
            ", ".join(
                f"{r['operator']} {r['dtype']} {r['tokens']} ({r['speedup']:.2f}x)"
                for r in fused_misses
            )
            or "none"
        )
        + "."
    )
    slow = [r for r in rows if r["elements"] >= LARGE_ELEMENTS and r["speedup"] < 0.8]
    lines.append(
        "- Rows with >= 64K elements below 0.8x: "
        + (
            ", ".join(
                f"{r['operator']} {r['dtype']} {r['tokens']} ({r['speedup']:.2f}x)"
                for r in slow
            )
            or "none"
        )
        + "."
    )
    products = [
        r
        for r in rows
        if r["operator"] in PRODUCTS
        and r["dtype"] == "float32"
        and r["tokens"] == PRODUCT_TOKENS
    ]
    if products:
        lines.append(
            f"- `gemm`/`linear`/`matmul` float32 at {PRODUCT_TOKENS} tokens "
            f"(target >= {PRODUCT_FLOOR}x): "
            + ", ".join(
                f"{r['operator']} {r['speedup']:.2f}x"
                + ("" if r["speedup"] >= PRODUCT_FLOOR else " (misses)")
                for r in products
            )
            + "."
        )
    sixteen = [
        r
        for r in rows
        if r["operator"] in PRODUCTS and r["dtype"] in ("float16", "bfloat16")
    ]
    if sixteen:
        lines.append(
            "- `gemm`/`linear`/`matmul` in 16 bits against torch (geometric "
            "mean over their points): "
            + ", ".join(
                f"{dtype} {speedup:.2f}x"
                for dtype in ("float16", "bfloat16")
                if (
                    speedup := geometric_mean(
                        r["speedup"] for r in sixteen if r["dtype"] == dtype
                    )
                )
            )
            + " (see the matrix-product table)."
        )
    memory = [
        r
        for r in rows
        if r["gbps"] and r["memory_bound"] and r["tokens"] == max(TOKENS)
    ]
    below = [r for r in memory if r["gbps"] < 0.7 * bandwidth]
    lines.append(
        f"- Memory-bound rows at {max(TOKENS)} tokens below 70% of the copy "
        f"bandwidth ({0.7 * bandwidth:.1f} GB/s; routing and sampling operators, "
        "which are compute-bound, not counted): "
        + (
            ", ".join(
                f"{r['operator']} {r['dtype']} ({r['gbps']:.1f} GB/s)" for r in below
            )
            or "none"
        )
        + f" ({len(memory) - len(below)} of {len(memory)} reach it)."
    )
    return lines


def markdown(rows, bandwidth, threads, rounds) -> str:
    header = [
        "# CPU operators against PyTorch eager",
        "",
        f"{date.today()}; {platform.machine()}, {os.cpu_count()} logical CPUs "
        f"({platform.processor() or 'unknown processor'}); Python "
        f"{platform.python_version()}, torch {torch.__version__}, numba "
        f"{numba.__version__}, infini.ops {infini.ops.__version__}; "
        f"{threads} threads on both sides; best of {rounds} alternating rounds.",
        "",
        f"Copy bandwidth (512 MiB `copy_`, read + write): **{bandwidth:.1f} GB/s**.",
        "",
        "Speed-up = PyTorch eager time / our time (> 1: we are faster). GB/s counts",
        "the bytes an operator must read and write at least.",
        "",
        "## Targets",
        "",
        *summary(rows, bandwidth),
        "",
        "## Per operator (geometric mean over shapes and dtypes)",
        "",
        "| operator | speed-up |",
        "|---|---|",
    ]
    for name, speedup in per_operator(rows):
        header.append(f"| `{name}` | {speedup:.2f}x |")
    header += product_table(rows)
    header += [
        "",
        "## All points",
        "",
        "| operator | dtype | shape | ours (µs) | torch (µs) | speed-up | GB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gbps = f"{r['gbps']:.1f}" if r["gbps"] else ""
        header.append(
            f"| `{r['operator']}` | {r['dtype']} | {r['label']} | "
            f"{r['ours'] * 1e6:.1f} | {r['torch'] * 1e6:.1f} | "
            f"{r['speedup']:.2f}x | {gbps} |"
        )
    return "\n".join(header) + "\n"


def product_table(rows) -> list[str]:
    """Speed-up of the matrix products per dtype and token count, so that
    the 16-bit gap to torch is stated next to the float32 target."""
    products = [r for r in rows if r["operator"] in PRODUCTS]
    if not products:
        return []
    tokens = sorted({r["tokens"] for r in products})
    lines = [
        "",
        "## Matrix products by dtype",
        "",
        "Speed-up over torch (`torch.mm` / `torch.addmm` / `torch.matmul`) at "
        f"(tokens, {HIDDEN}) x ({HIDDEN}, {HIDDEN}). float32 must reach "
        f"{PRODUCT_FLOOR}x at {PRODUCT_TOKENS} tokens. float16 is measured at 1 "
        "and 16 tokens only: torch's float16 CPU product takes a minute or more "
        "at 512 tokens (see `benchmarks/ops/gemm.py`).",
        "",
        "| operator | dtype | " + " | ".join(f"{t} tokens" for t in tokens) + " |",
        "|---|---|" + "---|" * len(tokens),
    ]
    for name in PRODUCTS:
        for dtype in (short(d) for d in DTYPES):
            points = {
                r["tokens"]: r
                for r in products
                if r["operator"] == name and r["dtype"] == dtype
            }
            if not points:
                continue
            cells = [
                f"{points[t]['speedup']:.2f}x ({points[t]['ours'] * 1e3:.2f} ms)"
                if t in points
                else "-"
                for t in tokens
            ]
            lines.append(f"| `{name}` | {dtype} | " + " | ".join(cells) + " |")
    return lines


def per_operator(rows):
    names = sorted({r["operator"] for r in rows})
    return [
        (n, geometric_mean(r["speedup"] for r in rows if r["operator"] == n))
        for n in names
    ]


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["operator"] for r in rows})
    dtypes = [short(d) for d in DTYPES]
    figure, axes = plt.subplots(figsize=(max(8, 0.45 * len(names) + 2), 5))
    width = 0.8 / len(dtypes)
    for index, dtype in enumerate(dtypes):
        values = [
            geometric_mean(
                r["speedup"] for r in rows if r["operator"] == n and r["dtype"] == dtype
            )
            or float("nan")
            for n in names
        ]
        axes.bar(
            [i + (index - (len(dtypes) - 1) / 2) * width for i in range(len(names))],
            values,
            width,
            label=dtype,
        )
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.axhline(2.0, color="grey", linewidth=0.8, linestyle="--")
    axes.set_yscale("log")
    axes.set_xticks(range(len(names)))
    axes.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    axes.set_ylabel("speed-up over PyTorch eager (geometric mean over shapes)")
    axes.set_title("infini.ops CPU operators vs PyTorch eager")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated operator names")
    parser.add_argument("--tokens", help="comma-separated token counts")
    parser.add_argument("--dtypes", help="comma-separated dtype names")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--name", default="cpu_operators", help="results file name")
    options = parser.parse_args()

    threads = numba.get_num_threads()
    torch.set_num_threads(threads)
    requested = set(options.ops.split(",")) if options.ops else None
    tokens_list = (
        tuple(int(t) for t in options.tokens.split(",")) if options.tokens else TOKENS
    )
    dtypes = (
        tuple(getattr(torch, d) for d in options.dtypes.split(","))
        if options.dtypes
        else DTYPES
    )
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth: {bandwidth:.1f} GB/s, threads: {threads}", flush=True)
    rows = run(available_operators(requested), tokens_list, dtypes, options.rounds)
    text = markdown(rows, bandwidth, threads, options.rounds)
    print("\n".join(summary(rows, bandwidth)))
    if options.write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{options.name}.md").write_text(text, encoding="utf-8")
        plot(rows, RESULTS / f"{options.name}.png")
        print(f"wrote {RESULTS / options.name}.md and {options.name}.png")


if __name__ == "__main__":
    main()
