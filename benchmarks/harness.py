"""Side-by-side timing of `infini.ops` against PyTorch eager on the same inputs.

An operator's benchmark is a module `benchmarks/ops/<op>.py` with a function
``cases(tokens, dtype)`` yielding `Case`s: our call and the best PyTorch eager
formulation of the same computation (its `out=` form where torch has one, so
neither side pays for allocating the result), plus the bytes the operator
must move at least, for memory-bound operators.

Timing alternates the two callables in rounds and keeps each side's fastest
round (the machine is shared and noisy; the minimum is the stable figure).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

# Decode and prefill shapes of a 7B-class model (issue 3's benchmark grid).
TOKENS = (1, 16, 512, 2048)
HIDDEN = 4096
INTERMEDIATE = 11008
HEADS = 32
KV_HEADS = 8
HEAD_SIZE = 128
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Operators at or above this many elements must not be slower than 0.8x torch.
LARGE_ELEMENTS = 64 * 1024


@dataclass
class Case:
    """One benchmark point of an operator."""

    label: str
    ours: Callable[[], None]
    torch: Callable[[], object]
    # Bytes read and written at least (None for compute-bound operators).
    bytes: int | None
    # Elements of the largest operand (for the 64K-element floor).
    elements: int
    # Fused operators carry a 2x target at prefill shapes.
    fused: bool = False


@dataclass
class Timing:
    ours: float
    torch: float

    @property
    def speedup(self) -> float:
        return self.torch / self.ours


def _time_once(function: Callable, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def calibrate(function: Callable, target_seconds: float) -> tuple[int, float]:
    """Calls per round so that a round takes about `target_seconds`, and the
    time of one call."""
    single = _time_once(function, 1)
    return max(1, min(10000, int(target_seconds / max(single, 1e-7)))), single


def time_pair(
    ours: Callable,
    reference: Callable,
    rounds: int = 7,
    round_seconds: float = 0.02,
    max_seconds: float = 10.0,
) -> Timing:
    """Each side's best mean time per call over `rounds` alternating rounds.

    Points where one call takes seconds (torch's 16-bit CPU matrix products)
    get fewer rounds, at least two, so that no side spends much more than
    `max_seconds` timing one point."""
    for function in (ours, reference):
        function()  # compile, allocate, fault pages in
        function()
    calls_ours, single_ours = calibrate(ours, round_seconds)
    calls_torch, single_torch = calibrate(reference, round_seconds)
    slowest = max(single_ours * calls_ours, single_torch * calls_torch)
    rounds = max(2, min(rounds, int(max_seconds / max(slowest, 1e-9))))
    best_ours = best_torch = float("inf")
    for _ in range(rounds):
        best_ours = min(best_ours, _time_once(ours, calls_ours))
        best_torch = min(best_torch, _time_once(reference, calls_torch))
    return Timing(best_ours, best_torch)


def copy_bandwidth(megabytes: int = 512, rounds: int = 5) -> float:
    """The machine's copy bandwidth in GB/s: a `megabytes` MiB copy with
    torch's threads, counting the read and the write."""
    count = megabytes * 1024 * 1024 // 4
    source = torch.ones(count, dtype=torch.float32)
    target = torch.empty_like(source)
    target.copy_(source)
    best = min(_time_once(lambda: target.copy_(source), 1) for _ in range(rounds))
    return 2 * source.nbytes / best / 1e9


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
