"""Running the precompile hooks of the build's kernel instantiations
(`python -m infini.ops precompile`), on every core.

The instantiations the manifest lists are grouped by operator, and each
operator's hooks (`<implementation class>.precompile`) run in one worker
process of a pool of `jobs` processes (default: the CPUs this process may
use). Workers compile into the same kernel cache, whose writes are atomic
and serialised per directory (`infini.ops.native.cpu.jit`), so the cache
holds what one process compiling every operator in turn would write. The
parent prints one line per instantiation as its operator finishes.

Only the standard library is used at module level.
"""

from __future__ import annotations

import importlib
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # Not on Linux.
        return max(1, os.cpu_count() or 1)


def _precompile_operator(items: list[dict]) -> list[tuple[str, str]]:
    """Runs the precompile hooks of one operator's instantiations; returns
    `(label, outcome)` per instantiation, where the outcome is
    ``compiled:<calls>:<seconds>``, ``first-use``, ``nothing`` or
    ``failed:<error>``."""
    outcomes = []
    for item in items:
        label = f"{item['operator']} on {item['device']} slot {item['slot']}"
        start = time.perf_counter()
        try:
            module = importlib.import_module(item["module"])
            hooks = [
                hook
                for value in vars(module).values()
                if isinstance(value, type)
                and getattr(value, "implementation_slot", None) == item["slot"]
                and getattr(value, "name", None) == item["operator"]
                and (hook := getattr(value, "precompile", None)) is not None
            ]
            compiled = sum(hook() or 0 for hook in hooks)
        except Exception as error:  # noqa: BLE001 - reported, the others go on
            # One failing warm-up must not leave every later operator
            # uncompiled; the exit status still reports it.
            outcomes.append((label, f"failed:{type(error).__name__}: {error}"))
            continue
        if compiled:
            seconds = time.perf_counter() - start
            outcomes.append((label, f"compiled:{compiled}:{seconds:.1f}"))
        elif hooks:
            outcomes.append((label, "first-use"))
        else:
            # ATen, hand-written torch and linked slots call kernels that
            # are compiled already.
            outcomes.append((label, "nothing"))
    return outcomes


def _report(label: str, outcome: str, failures: list[str]) -> None:
    kind, _, detail = outcome.partition(":")
    if kind == "compiled":
        calls, seconds = detail.split(":")
        print(f"{label}: compiled by {calls} warm-up calls in {seconds} s", flush=True)
    elif kind == "first-use":
        print(f"{label}: compiles on first use", flush=True)
    elif kind == "nothing":
        print(f"{label}: nothing to compile", flush=True)
    else:
        print(f"{label}: precompile failed: {detail}", flush=True)
        failures.append(label)


def precompile_instantiations(
    instantiations: list[dict], selected: list[str], jobs: int | None = None
) -> int:
    """Precompiles the instantiations of the `selected` operators (all when
    empty) with `jobs` processes; returns the exit status (1 when any
    failed)."""
    groups: dict[str, list[dict]] = {}
    for item in instantiations:
        if selected and item["operator"] not in selected:
            continue
        groups.setdefault(item["operator"], []).append(item)
    jobs = min(jobs or default_jobs(), max(1, len(groups)))
    failures: list[str] = []
    start = time.perf_counter()
    if jobs == 1:
        for items in groups.values():
            for label, outcome in _precompile_operator(items):
                _report(label, outcome, failures)
    else:
        import multiprocessing

        # `spawn`: the parent may have imported torch, whose threads a
        # forked child must not inherit.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = {
                pool.submit(_precompile_operator, items): operator
                for operator, items in groups.items()
            }
            for future in as_completed(futures):
                try:
                    outcomes = future.result()
                except Exception as error:  # noqa: BLE001 - a worker died
                    outcomes = [(futures[future], f"failed:{type(error).__name__}")]
                for label, outcome in outcomes:
                    _report(label, outcome, failures)
    print(
        f"precompiled {len(groups)} operators with {jobs} processes in "
        f"{time.perf_counter() - start:.1f} s",
        flush=True,
    )
    if failures:
        print(f"precompile failed for {len(failures)}: {', '.join(failures)}")
        return 1
    return 0
