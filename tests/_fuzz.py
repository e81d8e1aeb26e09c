"""The differential fuzz of the native CPU operators (issue 26): the
harness of `tests/test_differential_fuzz.py`.

`FUZZ[operator]` (in `tests/_fuzz_specs.py`) draws one random case of the
operator: its arguments in their logical form (contiguous tensors, the
scalars), and a float64 torch reference of every tensor it writes. The
harness here then

- gives the inputs random layouts: transposed (any order of the
  dimensions in memory), stepped (gaps between elements of a dimension),
  offset (a view starting inside a larger buffer) and expanded (a
  dimension of stride 0, whose values are then the same along it: the
  reference sees them too);
- places every written tensor in a larger buffer filled with a sentinel
  (again transposed, stepped or offset), so that a write outside it shows;
- calls the operator at the slot, and checks that no input's bytes
  changed, that nothing outside the written tensors changed, and that
  every written tensor matches the reference (integers exactly, floats to
  the tolerance of `close`).

A layout other than the plain contiguous one may be refused by the base
(a `ValueError`/`TypeError` naming the operator, nothing written): that is
the documented behaviour of a layout the operator does not accept, and is
counted as "refused" rather than a failure. The plain layouts must be
accepted.

Cases are reproducible from one number: case ``k`` of a run with seed
``s`` is case 0 of a run with seed ``s + k`` (`case_seed`), so every
failure prints a one-line command that reruns exactly that case.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import random
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
SIXTEEN = (torch.float16, torch.bfloat16)

# Sizes drawn for a dimension: 0 and 1, small primes, powers of two and
# their neighbours (the edges of vector widths and tiles).
SIZES = (0, 1, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 64, 67)

DEFAULT_SEED = 2026


def env_seed() -> int:
    return int(os.environ.get("INFINI_OPS_FUZZ_SEED", DEFAULT_SEED))


def env_cases(default: int) -> int:
    value = os.environ.get("INFINI_OPS_FUZZ_CASES")
    return int(value) if value else default


def env_ops() -> set[str] | None:
    value = os.environ.get("INFINI_OPS_FUZZ_OPS")
    return (
        {name.strip() for name in value.split(",") if name.strip()} if value else None
    )


def rerun_command(operator: str, seed: int, test_file: str) -> str:
    return (
        f"INFINI_OPS_FUZZ_SEED={seed} INFINI_OPS_FUZZ_CASES=1 "
        f"INFINI_OPS_FUZZ_OPS={operator} "
        f"python -m pytest {shlex.quote(test_file)} -p no:xdist"
    )


# -- drawing ------------------------------------------------------------------


class Draw:
    """The random source of one case: `rng` for structure, `gen` for tensor
    values, and `dtype`, the floating-point dtype drawn for the case."""

    def __init__(self, rng: random.Random, dtype: torch.dtype):
        self.rng = rng
        self.dtype = dtype
        self.gen = torch.Generator().manual_seed(rng.getrandbits(62))

    # Small sizes only (the Triton interpreter runs a kernel in Python).
    small = False

    def size(self, low: int = 0, high: int = 67) -> int:
        if self.small:
            high = max(low, min(high, 9))
        choices = [s for s in SIZES if low <= s <= high]
        return self.rng.choice(choices) if choices else low

    def choice(self, values):
        return self.rng.choice(list(values))

    def coin(self, p: float = 0.5) -> bool:
        return self.rng.random() < p

    def randint(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def uniform(self, low: float, high: float) -> float:
        return self.rng.uniform(low, high)

    def randn(self, *shape, dtype=None, scale: float = 1.0) -> torch.Tensor:
        values = torch.randn(shape, generator=self.gen, dtype=torch.float64) * scale
        return values.to(dtype or self.dtype)

    def rand(self, *shape, dtype=None, low=0.0, high=1.0) -> torch.Tensor:
        values = torch.rand(shape, generator=self.gen, dtype=torch.float64)
        return (low + (high - low) * values).to(dtype or self.dtype)

    def ints(self, low, high, *shape, dtype=torch.int64) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.gen, dtype=dtype)

    def perm(self, n, dtype=torch.int64) -> torch.Tensor:
        return torch.randperm(n, generator=self.gen).to(dtype)

    def out(self, *shape, dtype=None) -> torch.Tensor:
        # An output's first contents: NaN (or an integer sentinel), so that
        # an element never written fails the comparison.
        dtype = dtype or self.dtype
        if dtype.is_floating_point:
            return torch.full(shape, float("nan"), dtype=dtype)
        return torch.full(shape, -7, dtype=dtype)


@dataclass
class Case:
    """One drawn call.

    - `args`: positional arguments, outputs included, in binding order.
    - `reference(args64)`: from a copy of the arguments with every
      floating-point tensor in float64, the expected value of each written
      tensor, ``{position: expected}`` or ``{position: (expected, scale)}``
      (see `close`).
    - `length`: the length of the longest reduction behind one output
      element (1 for elementwise operators), for the tolerance.
    - `ulps`: the ``k`` of the tolerance.
    - `frozen`: positions whose values must not change (no expanded
      layout): indices, sorted inputs, ids that must stay distinct...
      Integer tensors are always frozen.
    - `fixed`: positions whose layout must stay contiguous (the base
      documents contiguous only).
    - `check`: an extra check of the written tensors instead of, or on top
      of, the reference (sampling operators): returns a problem or None.
    """

    args: list
    reference: object = None
    length: int = 1
    ulps: float = 4.0
    frozen: set = field(default_factory=set)
    fixed: set = field(default_factory=set)
    check: object = None
    what: str = ""


@dataclass
class Entry:
    draw: object
    dtypes: tuple = FLOATS
    # Run in a child process with the other operators of its group.
    group: str | None = None
    # Layouts for the outputs (False where the base documents contiguous
    # outputs only).
    output_layouts: bool = True
    # "all", or "offset" where the base documents packed tensors only (an
    # offset view of a larger buffer is still packed).
    layouts: str = "all"


# -- tolerance ----------------------------------------------------------------


def eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def close(got, expected, scale, dtype, length, ulps):
    """The elements of `got` (in `dtype`) farther from the float64
    `expected` than

        ulps * eps(dtype) * (|expected| + sqrt(length) * scale) + ulps * tiny / eps

    `scale` is the size of the terms behind each element (``|a| @ |b|`` of
    a product, the largest value of a softmax's row...; `expected`'s own
    size for elementwise operators). Rounding the result once costs
    ``eps / 2 * |expected|``; a sum of `length` terms, each rounded to
    the accumulation's precision, strays like a random walk, about
    ``eps * sqrt(length) * scale`` (bounded by ``length`` times that,
    never reached by independent errors); `ulps` leaves room for a few
    more roundings (an intermediate rounded to the dtype, a
    transcendental function's own error of a few ulps). `eps` is the
    output dtype's: 16-bit results accumulate in float32, which is far
    inside it. ``tiny / eps`` covers results near the bottom of the
    normal range, whose computation may pass through values outside it
    (``x / (1 + exp(-x))`` flushes to 0 when ``exp`` overflows).
    Returns a description of the worst element, or None."""
    got64 = got.to(torch.float64)
    expected = expected.to(torch.float64)
    if got64.shape != expected.shape:
        return f"shape {tuple(got64.shape)} != expected {tuple(expected.shape)}"
    if got64.numel() == 0:
        return None
    nan_expected = torch.isnan(expected)
    nan_got = torch.isnan(got64)
    if not torch.equal(nan_expected, nan_got):
        where = (nan_expected != nan_got).nonzero()[0].tolist()
        return (
            f"NaN mismatch at {where}: got {got64[tuple(where)].item()!r}, "
            f"expected {expected[tuple(where)].item()!r}"
        )
    # A finite result half an ulp past the dtype's largest value rounds to
    # infinity (that ulp is about ``largest * eps / 2``).
    largest = torch.finfo(dtype).max
    expected = torch.where(
        expected.abs() >= largest * (1 + torch.finfo(dtype).eps / 4),
        expected.sign() * math.inf,
        expected,
    )
    inf = torch.isinf(expected) | torch.isinf(got64)
    if inf.any() and not torch.equal(got64[inf], expected[inf]):
        where = (inf & (got64 != expected)).nonzero()[0].tolist()
        return f"infinity mismatch at {where}"
    finite = ~(nan_expected | inf)
    scale = torch.as_tensor(scale, dtype=torch.float64).expand_as(expected)
    info = torch.finfo(dtype)
    bound = ulps * info.eps * (expected.abs() + math.sqrt(max(length, 1)) * scale)
    bound = bound + ulps * info.tiny / info.eps
    error = (got64 - expected).abs()
    bad = finite & (error > bound)
    if not bad.any():
        return None
    excess = torch.where(bad, error / bound, torch.zeros_like(error))
    where = list(divmod_index(int(excess.argmax()), expected.shape))
    index = tuple(where)
    return (
        f"{int(bad.sum())} of {expected.numel()} elements outside the tolerance; "
        f"worst at {where}: got {got64[index].item()!r}, expected "
        f"{expected[index].item()!r} (bound {bound[index].item():.3g}, "
        f"{ulps} ulps, length {length})"
    )


def divmod_index(flat: int, shape) -> list[int]:
    index = []
    for size in reversed(shape):
        flat, rest = divmod(flat, size) if size else (flat, 0)
        index.append(rest)
    return index[::-1]


# -- layouts ------------------------------------------------------------------


@dataclass
class Placed:
    """A tensor placed in a larger buffer: `view` is what the operator
    gets, `buffer` the whole storage (its bytes outside the view must stay
    as they were), `what` the layout in words."""

    view: torch.Tensor
    buffer: torch.Tensor
    what: str


def _plain(tensor: torch.Tensor) -> Placed:
    copy = tensor.clone().contiguous()
    return Placed(copy, copy.reshape(-1), "contiguous")


def place(tensor: torch.Tensor, rng: random.Random, sentinel, layout=True) -> Placed:
    """`tensor`'s values in a random layout: the dimensions in a random
    memory order, some with a gap between elements, the whole at an offset
    inside a buffer filled with `sentinel`. `layout` "offset" keeps it
    packed (an offset only)."""
    if not layout or rng.random() < 0.4:
        return _plain(tensor)
    ndim = tensor.ndim
    order = list(range(ndim))
    words = []
    packed = layout == "offset"
    if ndim > 1 and not packed and rng.random() < 0.5:
        rng.shuffle(order)
        if order != sorted(order):
            words.append(f"dimensions in memory order {order}")
    steps = [1] * ndim
    if ndim and not packed and rng.random() < 0.5:
        dim = rng.randrange(ndim)
        steps[dim] = rng.choice((2, 3))
        words.append(f"step {steps[dim]} in dimension {dim}")
    offset = rng.choice((0, 0, 1, 3, 8))
    if offset:
        words.append(f"offset {offset}")
    if not words:
        return _plain(tensor)
    # Strides from the innermost dimension of `order` (its last) outwards.
    strides = [0] * ndim
    stride = 1
    for dim in reversed(order):
        strides[dim] = stride * steps[dim]
        stride = strides[dim] * max(tensor.shape[dim], 1)
    span = 1 + sum((s - 1) * st for s, st in zip(tensor.shape, strides, strict=True))
    if tensor.numel() == 0:
        span = 0
    buffer = torch.full(
        (offset + span + rng.choice((0, 2)),), sentinel, dtype=tensor.dtype
    )
    view = buffer.as_strided(tensor.shape, strides, offset)
    view.copy_(tensor)
    return Placed(view, buffer, ", ".join(words))


def expand_some(tensor: torch.Tensor, rng: random.Random) -> tuple[torch.Tensor, str]:
    """A stride-0 view along one dimension of size > 1 (the values along
    it become those of its first slice), or `tensor` itself."""
    dims = [d for d, s in enumerate(tensor.shape) if s > 1]
    if not dims:
        return tensor, ""
    dim = rng.choice(dims)
    slice_ = tensor.narrow(dim, 0, 1).clone()
    return slice_.expand(tensor.shape), f"expanded along dimension {dim}"


def footprint(view: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """A mask of the elements of `buffer` that `view` covers."""
    mask = torch.zeros(buffer.numel(), dtype=torch.bool)
    if view.numel():
        offset = view.storage_offset() - buffer.storage_offset()
        positions = torch.arange(buffer.numel()).as_strided(
            view.shape, view.stride(), offset
        )
        mask[positions.reshape(-1)] = True
    return mask


def sentinel_of(dtype: torch.dtype):
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point:
        return -1234.5 if dtype != torch.float8_e4m3fn else -3.0
    return -77 if dtype.is_signed else 177


# -- running one case -----------------------------------------------------------


@dataclass
class Outcome:
    status: str  # "ok", "refused", "unsupported" or "failed"
    problem: str | None = None
    what: str = ""


def _float64(value):
    if isinstance(value, torch.Tensor):
        return value.to(torch.float64) if value.is_floating_point() else value.clone()
    if isinstance(value, (list, tuple)):
        return [_float64(v) for v in value]
    return value


def _storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of every byte of `tensor`'s storage (as uint8)."""
    whole = torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())
    return whole.clone()


@functools.cache
def _overloads(operator: str):
    """The overloads of `operator`'s native CPU implementation, as the
    hostile matrix reads them (`tests/test_hostile_matrix._parameters`)."""
    from infini.ops.core.manifest import load_manifest
    from infini.ops.core.signature import Overload

    entries = [
        e
        for e in load_manifest()["operators"][operator]["implementations"]
        if "cpu" in e["devices"]
    ]
    entry = min(entries, key=lambda e: (e["backend"] != "native", e["slot"]))
    cls = getattr(importlib.import_module(entry["module"]), entry["class"])
    return [Overload(i, text) for i, text in enumerate(cls.overloads)]


def _parameters(operator: str, args):
    from infini.ops.core.signature import resolve

    bound = resolve(_overloads(operator), tuple(args), {})
    assert bound is not None, f"the fuzz call of `{operator}` binds to no overload"
    return bound[0].parameters


def written_positions(operator: str, args) -> dict[int, str]:
    """Position -> name of every tensor argument the overload the arguments
    bind to writes (its `Tensor!` parameters)."""
    return {
        i: p.name
        for i, p in enumerate(_parameters(operator, args))
        if p.writes and i < len(args) and isinstance(args[i], torch.Tensor)
    }


def parameter_names(operator: str, args) -> list[str]:
    return [p.name for p in _parameters(operator, args)]


def run_case(operator: str, slot: int, seed: int, entry: Entry) -> Outcome:
    import infini.ops

    rng = random.Random(f"{operator}/{slot}/{seed}")
    dtype = rng.choice(entry.dtypes)
    case = entry.draw(Draw(rng, dtype))
    args = list(case.args)
    names = parameter_names(operator, args)
    written = written_positions(operator, args)
    words = [f"dtype {str(dtype).removeprefix('torch.')}"]
    if case.what:
        words.append(case.what)

    # Expanded inputs first: the reference reads the values they give.
    for i, value in enumerate(args):
        if (
            isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and i not in written
            and i not in case.frozen
            and i not in case.fixed
            and rng.random() < 0.15
        ):
            args[i], how = expand_some(value, rng)
            if how:
                words.append(f"`{names[i]}` {how}")
    expected = case.reference(_float64(args)) if case.reference else {}

    inputs: list[tuple[torch.Tensor, torch.Tensor]] = []
    outputs: dict[int, tuple[Placed, torch.Tensor, torch.Tensor]] = {}
    plain = True
    call = []
    for i, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            if 0 in value.stride() and value.numel() > 1:
                plain = False
                call.append(value)
                inputs.append((value, _storage_bytes(value)))
                continue
            allowed = i not in case.fixed and (i not in written or entry.output_layouts)
            placed = place(
                value,
                rng,
                sentinel_of(value.dtype),
                allowed and ("offset" if entry.layouts == "offset" else True),
            )
            if placed.what != "contiguous":
                plain = False
                words.append(f"`{names[i]}` {placed.what}")
            call.append(placed.view)
            if i in written:
                outputs[i] = (
                    placed,
                    placed.buffer.clone(),
                    footprint(placed.view, placed.buffer),
                )
            else:
                inputs.append((placed.view, _storage_bytes(placed.view)))
        elif isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            items = []
            for j, item in enumerate(value):
                placed = place(item, rng, sentinel_of(item.dtype), i not in case.fixed)
                if placed.what != "contiguous":
                    plain = False
                    words.append(f"`{names[i]}[{j}]` {placed.what}")
                items.append(placed.view)
                inputs.append((placed.view, _storage_bytes(placed.view)))
            call.append(items)
        else:
            call.append(value)
    what = "; ".join(words)

    def unchanged() -> str | None:
        for tensor, before in inputs:
            if not torch.equal(_storage_bytes(tensor), before):
                return "an input was modified"
        for i, (placed, before, mask) in outputs.items():
            if not torch.equal(
                placed.buffer[~mask].view(torch.uint8)
                if placed.buffer.dtype != torch.bool
                else placed.buffer[~mask],
                before[~mask].view(torch.uint8)
                if before.dtype != torch.bool
                else before[~mask],
            ):
                return f"written outside `{names[i]}`"
        return None

    try:
        getattr(infini.ops, operator)(*call, implementation_index=slot)
    except (ValueError, TypeError) as error:
        message = str(error)
        if f"`{operator}`" not in message:
            return Outcome(
                "failed", f"an error that does not name the operator: {message}", what
            )
        if "which this implementation does not support" in message:
            # A slot's documented dtypes (fewer than the base's): counted
            # apart, after the same checks of what was written.
            if _written_anything(outputs) or unchanged():
                return Outcome("failed", f"refused after writing: {message}", what)
            return Outcome("unsupported", message, what)
        if plain:
            return Outcome("failed", f"a plain call refused: {message}", what)
        if "dtype" in message:
            # Layouts may be refused, the dtypes the entry draws may not.
            return Outcome("failed", f"a drawn dtype refused: {message}", what)
        written_anyway = _written_anything(outputs) or unchanged()
        if written_anyway:
            return Outcome(
                "failed", f"refused after writing ({written_anyway}): {message}", what
            )
        return Outcome("refused", message, what)
    except Exception as error:  # noqa: BLE001 - any other exception is the finding
        return Outcome("failed", f"raised {type(error).__name__}: {error}", what)

    problem = unchanged()
    if problem:
        return Outcome("failed", problem, what)
    for i, target in expected.items():
        scale = None
        if isinstance(target, tuple):
            target, scale = target
        got = call[i]
        if not (got.is_floating_point() or got.is_complex()):
            if got.shape != target.shape or not torch.equal(got, target.to(got.dtype)):
                return Outcome(
                    "failed",
                    f"`{names[i]}` differs: got {got.tolist()} "
                    f"expected {target.tolist()}"[:2000],
                    what,
                )
            continue
        if scale is None:
            scale = target.abs()
        problem = close(got, target, scale, got.dtype, case.length, case.ulps)
        if problem:
            return Outcome("failed", f"`{names[i]}`: {problem}", what)
    if case.check is not None:
        problem = case.check(call)
        if problem:
            return Outcome("failed", problem, what)
    return Outcome("ok", None, what)


def _written_anything(outputs) -> str | None:
    for i, (placed, before, _mask) in outputs.items():
        if not torch.equal(
            placed.buffer.view(torch.uint8)
            if placed.buffer.dtype != torch.bool
            else placed.buffer,
            before.view(torch.uint8) if before.dtype != torch.bool else before,
        ):
            return f"output {i} written"
    return None


# -- runs -----------------------------------------------------------------------


def case_seed(seed: int, k: int) -> int:
    return seed + k


def run_pairs(pairs, seed: int, cases: int, entries, report=None) -> dict:
    """Runs `cases` cases of every (operator, slot) in `pairs`; returns
    counts and failures. `report(line)` hears of each case before it runs
    (a child process prints it, so that a crash names its case)."""
    counts = {"ok": 0, "refused": 0, "unsupported": 0, "failed": 0}
    failures = []
    # A few refusals, to tell layouts the base does not accept from calls
    # the fuzz drew wrongly.
    refusals = []
    for operator, slot in pairs:
        for k in range(cases):
            s = case_seed(seed, k)
            if report:
                report(json.dumps({"case": [operator, slot, s]}))
            try:
                outcome = run_case(operator, slot, s, entries[operator])
            except Exception as error:  # noqa: BLE001 - an entry's own defect
                outcome = Outcome("failed", f"the fuzz entry raised {error!r}")
            counts[outcome.status] += 1
            if outcome.status == "refused" and len(refusals) < 5:
                refusals.append(
                    f"{operator} slot {slot} seed {s} ({outcome.what}): "
                    f"{outcome.problem}"
                )
            if outcome.status == "failed":
                failure = {
                    "operator": operator,
                    "slot": slot,
                    "seed": s,
                    "problem": outcome.problem,
                    "what": outcome.what,
                }
                failures.append(failure)
                if report:
                    report(json.dumps({"failure": failure}))
    return {"counts": counts, "failures": failures, "refusals": refusals}


def describe(failure: dict, test_file: str) -> str:
    return (
        f"`{failure['operator']}` slot {failure['slot']} seed {failure['seed']} "
        f"({failure['what']}): {failure['problem']}\n    rerun: "
        + rerun_command(failure["operator"], failure["seed"], test_file)
    )


def run_in_child(pairs, seed: int, cases: int, timeout: float = 900) -> dict:
    """`run_pairs` in a child process: a crash (a signal, an abort) is
    reported with the case it happened in."""
    root = Path(__file__).resolve().parents[1]
    command = [
        sys.executable,
        "-c",
        "import sys, tests._fuzz as f; f.child_main(sys.argv[1:])",
        str(seed),
        str(cases),
        *[f"{operator}:{slot}" for operator, slot in pairs],
    ]
    result = subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=timeout
    )
    last = None
    summary = None
    failures = []
    for line in result.stdout.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if "case" in event:
            last = event["case"]
        elif "failure" in event:
            failures.append(event["failure"])
        elif "summary" in event:
            summary = event["summary"]
    if result.returncode != 0 or summary is None:
        operator, slot, s = last if last else ("?", "?", seed)
        failures.append(
            {
                "operator": operator,
                "slot": slot,
                "seed": s,
                "problem": f"the child process ended with status {result.returncode}: "
                + result.stderr[-1500:],
                "what": "crash",
            }
        )
        counts = {"ok": 0, "refused": 0, "unsupported": 0, "failed": len(failures)}
        return {"counts": counts, "failures": failures, "refusals": []}
    return summary


def child_main(argv) -> None:
    from tests._fuzz_specs import FUZZ

    seed, cases = int(argv[0]), int(argv[1])
    pairs = []
    for item in argv[2:]:
        operator, slot = item.rsplit(":", 1)
        pairs.append((operator, int(slot)))

    def report(line):
        print(line, flush=True)

    summary = run_pairs(pairs, seed, cases, FUZZ, report)
    print(json.dumps({"summary": summary}), flush=True)
