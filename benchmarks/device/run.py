"""The device check: everything the accelerator half needs proven, in one
run on a bare NVIDIA machine (an H200), under nine minutes.

    python3 benchmarks/device/run.py --out OUT            # on the GPU machine
    python benchmarks/device/run.py --out OUT --dry-run   # anywhere, on a CPU

Sections, in order, each with a time cap and all under a global deadline
(`--deadline`, 510 s by default: a section that would start past it is
reported as not started, and the report is written whatever happens):

1. `install`: the wheels in `benchmarks/device/wheels/` that the machine
   lacks (``pip install --no-index --no-deps``; fill the folder with
   `benchmarks/device/wheels.py`), then this source tree with
   ``pip install --no-build-isolation --no-deps .`` and ``WITH_NVIDIA``,
   ``WITH_TRITON``, ``WITH_TORCH`` (and ``WITH_NINETOOTHED`` when its wheel
   travelled), no CPU kernels compiled ahead (``INFINI_OPS_PRECOMPILE=none``).
2. `environment`: Python, torch, Triton, transformers, the GPU and its
   clocks, and what the installed build holds.
3. `products`: `gemm` and `linear` in bfloat16 and float16 at 4096^3 and at
   decode shapes, TFLOP/s against `torch.mm`.
4. `memory`: every memory-bound operator with a CUDA-like kernel, at large
   shapes (the cases of `benchmarks/ops/<op>.py`, allocated on the GPU), in
   GB/s and as a fraction of a device-to-device copy timed in the same run,
   against torch's formulation of the same computation.
5. `attention`: paged decode and prefill attention against
   `torch.nn.functional.scaled_dot_product_attention` on the same data.
6. `model`: SmolLM2-135M's configuration with random weights against
   transformers' `LlamaForCausalLM` holding the same weights: greedy tokens in
   float32 (they must match), then bfloat16 decode tokens/s at batch 1 and 8
   and a 512-token prefill.
7. `tests`: the operators' tests with ``--devices nvidia`` (real launches)
   at slot 0 (`--test-slots`), one pytest process per file, most cores at a
   time (Triton's compiles are what takes long), each file capped; passed /
   failed / skipped per operator. Last, so it takes the time the others
   leave; files it cannot start are reported as not run.

Each measuring section runs in its own process (a kernel fault cannot take
the rest down) and records its results as it goes, so a section stopped at
its cap still reports what it measured. Times are medians of many
repetitions, taken with CUDA events.

Outputs under `--out`: `report.md` (the template `benchmarks/results/h200.md`
filled in), `report.json` (every number) and `run.log` (every process's
output). ``--write-results`` also writes the filled template back to
`benchmarks/results/h200.md`.

`--dry-run` runs the same code on a CPU through Triton's interpreter
(``INFINI_OPS_TRITON_INTERPRET=1``, this tree's `src/` and a manifest
generated from it), with tiny sizes and single repetitions,
nothing installed, in under two minutes: CI runs it so that the script
cannot rot while no GPU is at hand. Its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WHEELS = HERE / "wheels"
TEMPLATE = REPO / "benchmarks" / "results" / "h200.md"

# Seconds each section may take at most (device run, dry run).
CAPS = {
    "install": (150, 20),
    "environment": (40, 30),
    "products": (50, 40),
    "memory": (100, 40),
    "attention": (50, 40),
    "model": (120, 70),
    # Last: the operator tests take whatever time is left.
    "tests": (300, 45),
}
SECTIONS = tuple(CAPS)
# A section is not started with less than this left before the deadline.
MIN_START = 8.0
# Kept back from every budget for writing the report.
RESERVE = 5.0

# Targets of issue 21.
MEMORY_TARGET = 0.8  # of the copy bandwidth
GEMM_TARGET = 0.8  # of torch.mm, bfloat16 at 4096^3
DECODE_B1_TARGET = 1.5  # x transformers' generate
DECODE_B8_TARGET = 5.0  # x our batch 1

# Wheels that may travel, by distribution name; each is installed only
# where the machine lacks that distribution.
TRAVELLING = (
    "gguf",
    "ninetoothed",
    "pytest",
    "pluggy",
    "iniconfig",
    "packaging",
    "hypothesis",
    "sortedcontainers",
)


# -- shared helpers ------------------------------------------------------------


def log(message: str) -> None:
    print(f"[device {time.strftime('%H:%M:%S')}] {message}", flush=True)


def error_text(error: BaseException) -> str:
    """The error's type and message, with the innermost frame (one line)."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    return f"{type(error).__name__}: {first[:400]}{where}"


class Recorder:
    """A section's results, written to `path` (JSON) after every change so
    that a section killed at its cap still leaves what it measured."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = {}

    def set(self, key: str, value) -> None:
        self.data[key] = value
        self.flush()

    def append(self, key: str, value) -> None:
        self.data.setdefault(key, []).append(value)
        self.flush()

    def flush(self) -> None:
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(partial, self.path)


class Clock:
    """Per-call times of callables: CUDA events on a GPU (the median over
    `rounds` rounds of calls lasting about `round_seconds` each), one
    `perf_counter` call in a dry run."""

    def __init__(self, dry: bool) -> None:
        import torch

        self.torch = torch
        self.gpu = not dry and torch.cuda.is_available()
        self.dry = dry
        self.rounds = 1 if dry else 15
        self.round_seconds = 0.003

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def _round(self, function, calls: int) -> float:
        if not self.gpu:
            begin = time.perf_counter()
            for _ in range(calls):
                function()
            return (time.perf_counter() - begin) / calls
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            function()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls

    def compare(self, *functions) -> list[float]:
        """The median seconds per call of each function, their rounds
        interleaved (so drifting clocks hit all alike)."""
        for function in functions:
            function()  # compiles, allocates
        self.sync()
        counts = [1] * len(functions)
        for index, function in enumerate(functions):
            if not self.dry:  # (the interpreter is slow enough for one call)
                single = max(self._round(function, 1), 1e-7)
                counts[index] = max(1, min(2000, int(self.round_seconds / single)))
        samples = [[] for _ in functions]
        for _ in range(self.rounds):
            for index, function in enumerate(functions):
                samples[index].append(self._round(function, counts[index]))
        return [statistics.median(times) for times in samples]


def device_name(dry: bool) -> str:
    """The torch device the measuring sections allocate on: the GPU, or in a
    dry run the CPU tensors the interpreter treats as the NVIDIA device."""
    return "cpu" if dry else "cuda"


# -- section: environment (child) ----------------------------------------------


def section_environment(record: Recorder, dry: bool) -> None:
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "transformers", "numpy", "numba", "gguf", "ninetoothed"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    versions["cuda (torch)"] = torch.version.cuda
    record.set("versions", versions)
    record.set("machine", {"platform": platform.platform(), "cpus": os.cpu_count()})
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        record.set(
            "gpu",
            {
                "name": properties.name,
                "capability": f"{properties.major}.{properties.minor}",
                "multiprocessors": properties.multi_processor_count,
                "memory_gib": round(properties.total_memory / 2**30, 1),
                "l2_mib": round(getattr(properties, "L2_cache_size", 0) / 2**20, 1),
            },
        )
        query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit"
        try:
            smi = subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            record.set("nvidia_smi", smi.stdout.strip() or smi.stderr.strip())
        except (OSError, subprocess.SubprocessError) as error:
            record.set("nvidia_smi", error_text(error))
    else:
        record.set("gpu", None)
    import infini.ops

    package = Path(infini.ops.__file__).resolve().parent
    manifest = os.environ.get("INFINI_OPS_MANIFEST") or str(
        package / "_generated" / "manifest.json"
    )
    data = json.loads(Path(manifest).read_text())
    record.set(
        "build",
        {
            "package": str(package),
            "manifest": manifest,
            "devices": data.get("devices"),
            "backends": data.get("backends"),
            "cuda_like_slot_0": len(cuda_like_operators(data)),
            "interpreter": bool(os.environ.get("INFINI_OPS_TRITON_INTERPRET")),
        },
    )


def cuda_like_operators(manifest: dict) -> list[str]:
    """Operators with a CUDA-like kernel (native, NVIDIA) at slot 0."""
    names = []
    for name, entry in manifest["operators"].items():
        for implementation in entry.get("implementations", []):
            if implementation["slot"] == 0 and "nvidia" in implementation["devices"]:
                names.append(name)
                break
    return sorted(names)


# -- section: products (child) -------------------------------------------------


def section_products(record: Recorder, dry: bool) -> None:
    import torch

    import infini.ops

    device = device_name(dry)
    clock = Clock(dry)
    if dry:
        shapes, dtypes = ((8, 32, 32),), (torch.bfloat16,)
    else:
        shapes = ((4096, 4096, 4096), (1, 4096, 4096), (16, 4096, 4096))
        shapes += ((1, 11008, 4096), (16, 11008, 4096))
        dtypes = (torch.bfloat16, torch.float16)
    for dtype in dtypes:
        for m, n, k in shapes:
            a = torch.randn(m, k, dtype=dtype, device=device)
            b = torch.randn(k, n, dtype=dtype, device=device) / k**0.5
            weight = torch.randn(n, k, dtype=dtype, device=device) / k**0.5
            y = torch.empty(m, n, dtype=dtype, device=device)
            calls = {
                "gemm": (
                    lambda a=a, b=b, y=y: infini.ops.gemm(a, b, y),
                    lambda a=a, b=b, y=y: torch.mm(a, b, out=y),
                    lambda a=a, b=b: a.float() @ b.float(),
                ),
                "linear": (
                    lambda a=a, w=weight, y=y: infini.ops.linear(a, w, None, y),
                    lambda a=a, w=weight, y=y: torch.mm(a, w.t(), out=y),
                    lambda a=a, w=weight: a.float() @ w.float().t(),
                ),
            }
            for name, (ours, reference, exact) in calls.items():
                entry = {
                    "operator": name,
                    "dtype": str(dtype).removeprefix("torch."),
                    "shape": [m, n, k],
                }
                try:
                    ours()
                    clock.sync()
                    expected = exact()
                    entry["max_error"] = float((y.float() - expected).abs().max())
                    seconds, torch_seconds = clock.compare(ours, reference)
                    flops = 2 * m * n * k
                    entry.update(
                        ours_s=seconds,
                        torch_s=torch_seconds,
                        ours_tflops=flops / seconds / 1e12,
                        torch_tflops=flops / torch_seconds / 1e12,
                        ratio=torch_seconds / seconds,
                    )
                except Exception as error:  # noqa: BLE001 - reported, not raised
                    entry["error"] = error_text(error)
                record.append("products", entry)


# -- section: memory (child) ---------------------------------------------------

# The operators' benchmark specs (`benchmarks/ops/<op>.py`) read these sizes
# when imported; a dry run shrinks them first.
DRY_SIZES = {
    "HIDDEN": 64,
    "INTERMEDIATE": 128,
    "HEADS": 4,
    "KV_HEADS": 2,
    "HEAD_SIZE": 16,
}
DRY_MEMORY_OPERATORS = ("add", "rms_norm", "silu_and_mul")
# Rows of the memory-bound cases (`tokens` of the specs): 16384 rows of 4096
# bfloat16 values are 128 MiB per operand, about twice the H200's L2.
MEMORY_TOKENS = 16384


def _copy_bandwidth(record: Recorder, clock: Clock, device: str, elements) -> float:
    """GB/s (bytes read plus written) of a device-to-device copy of
    `elements` bfloat16 values."""
    import torch

    source = torch.randn(elements, dtype=torch.bfloat16, device=device)
    target = torch.empty_like(source)
    (seconds,) = clock.compare(lambda: target.copy_(source))
    copy_bytes = 2 * source.numel() * source.element_size()
    gbs = copy_bytes / seconds / 1e9
    record.set("copy", {"bytes": copy_bytes, "seconds": seconds, "gbs": gbs})
    return gbs


def section_memory(record: Recorder, dry: bool) -> None:
    import torch

    import benchmarks.harness as harness

    if dry:
        for name, value in DRY_SIZES.items():
            setattr(harness, name, value)
    device = device_name(dry)
    clock = Clock(dry)
    copy_gbs = _copy_bandwidth(record, clock, device, 4096 if dry else 2**28)

    import infini.ops
    from infini.ops.core.schema import class_name_of

    candidates = []
    for path in sorted((REPO / "benchmarks" / "ops").glob("*.py")):
        name = path.stem
        if name.startswith("_") or (dry and name not in DRY_MEMORY_OPERATORS):
            continue
        cls = getattr(infini.ops, class_name_of(name), None)
        if cls is not None and 0 in cls.active_implementation_indices("nvidia"):
            candidates.append(name)
    record.set("operators_considered", candidates)
    tokens = 4 if dry else MEMORY_TOKENS
    for name in candidates:
        try:
            module = importlib.import_module(f"benchmarks.ops.{name}")
            if not getattr(module, "MEMORY_BOUND", True):
                continue
            # The specs allocate with torch's default device.
            with torch.device(device):
                cases = list(module.cases(tokens, torch.bfloat16))
        except Exception as error:  # noqa: BLE001
            record.append("operators", {"operator": name, "error": error_text(error)})
            continue
        for case in cases:
            if case.bytes is None:
                continue  # compute-bound (products, attention): other sections
            entry = {"operator": name, "case": case.label, "bytes": case.bytes}
            try:
                seconds, torch_seconds = clock.compare(case.ours, case.torch)
                entry.update(
                    ours_s=seconds,
                    torch_s=torch_seconds,
                    ours_gbs=case.bytes / seconds / 1e9,
                    torch_gbs=case.bytes / torch_seconds / 1e9,
                    of_copy=case.bytes / seconds / 1e9 / copy_gbs,
                    ratio=torch_seconds / seconds,
                )
            except Exception as error:  # noqa: BLE001
                entry["error"] = error_text(error)
            record.append("operators", entry)
        del cases
        if clock.gpu:
            torch.cuda.empty_cache()


# -- section: attention (child) ------------------------------------------------


def _paged_cache(seqs, context, kv_heads, head_size, block_size, dtype, device):
    """A shuffled paged cache of `context` tokens per sequence, and its
    dense ``(seqs, kv_heads, context, head_size)`` keys and values."""
    import torch

    per_seq = -(-context // block_size)
    blocks = seqs * per_seq
    shape = (blocks, kv_heads, block_size, head_size)
    k_cache = torch.randn(shape, dtype=dtype, device=device)
    v_cache = torch.randn(shape, dtype=dtype, device=device)
    tables = torch.randperm(blocks, device=device).to(torch.int32).view(seqs, per_seq)

    def dense(cache):
        pages = cache[tables.long()].permute(0, 2, 1, 3, 4)
        return pages.reshape(seqs, kv_heads, per_seq * block_size, head_size)[
            :, :, :context
        ].contiguous()

    lengths = torch.full((seqs,), context, dtype=torch.int32, device=device)
    return k_cache, v_cache, tables, lengths, dense(k_cache), dense(v_cache)


class AttentionGeometry:
    """Heads, sizes and dtype of the attention section's points."""

    def __init__(self, dry: bool) -> None:
        import torch

        self.device = device_name(dry)
        self.dtype = torch.bfloat16
        if dry:
            self.heads, self.kv_heads, self.head_size, self.block_size = 4, 2, 16, 16
        else:
            self.heads, self.kv_heads, self.head_size, self.block_size = 32, 8, 128, 16
        self.scale = self.head_size**-0.5

    def cache(self, seqs: int, context: int):
        return _paged_cache(
            seqs,
            context,
            self.kv_heads,
            self.head_size,
            self.block_size,
            self.dtype,
            self.device,
        )

    def describe(self) -> dict:
        names = ("heads", "kv_heads", "head_size", "block_size")
        return {name: getattr(self, name) for name in names} | {"dtype": "bfloat16"}


def _decode_point(geometry, clock, seqs: int, context: int) -> dict:
    """`paged_attention_infinilm` against SDPA over the same keys and values
    (gathered into dense tensors beforehand, untimed)."""
    import torch
    import torch.nn.functional as F

    import infini.ops

    g = geometry
    k_cache, v_cache, tables, lengths, keys, values = g.cache(seqs, context)
    q = torch.randn(seqs, g.heads, g.head_size, dtype=g.dtype, device=g.device)
    out = torch.empty_like(q)
    query = q[:, :, None, :]

    def ours():
        infini.ops.paged_attention_infinilm(
            q, k_cache, v_cache, tables, lengths, None, g.scale, out
        )

    def sdpa():
        return F.scaled_dot_product_attention(
            query, keys, values, scale=g.scale, enable_gqa=True
        )

    ours()
    entry = {"max_error": float((out - sdpa()[:, :, 0]).abs().max())}
    seconds, torch_seconds = clock.compare(ours, sdpa)
    kv_bytes = 2 * keys.numel() * keys.element_size()
    entry.update(
        ours_s=seconds,
        torch_s=torch_seconds,
        ratio=torch_seconds / seconds,
        ours_gbs=kv_bytes / seconds / 1e9,
        torch_gbs=kv_bytes / torch_seconds / 1e9,
    )
    return entry


def _prefill_point(geometry, clock, seqs: int, tokens: int) -> dict:
    """`paged_attention_prefill_infinilm` over `seqs` prompts of `tokens`
    new tokens each against causal SDPA on the same data."""
    import torch
    import torch.nn.functional as F

    import infini.ops

    g = geometry
    k_cache, v_cache, tables, lengths, keys, values = g.cache(seqs, tokens)
    shape = (seqs * tokens, g.heads, g.head_size)
    q = torch.randn(shape, dtype=g.dtype, device=g.device)
    out = torch.empty_like(q)
    step = tokens
    cum = torch.arange(0, (seqs + 1) * step, step, dtype=torch.int32, device=g.device)
    query = q.view(seqs, tokens, g.heads, g.head_size).transpose(1, 2)

    def ours():
        infini.ops.paged_attention_prefill_infinilm(
            q, k_cache, v_cache, tables, lengths, cum, None, g.scale, out
        )

    def sdpa():
        return F.scaled_dot_product_attention(
            query, keys, values, scale=g.scale, is_causal=True, enable_gqa=True
        )

    ours()
    expected = sdpa().transpose(1, 2).reshape(shape)
    entry = {"max_error": float((out - expected).abs().max())}
    seconds, torch_seconds = clock.compare(ours, sdpa)
    # The causal products' useful work: half of QK^T and half of PV.
    flops = 2 * seqs * g.heads * tokens * tokens * g.head_size
    entry.update(
        ours_s=seconds,
        torch_s=torch_seconds,
        ratio=torch_seconds / seconds,
        ours_tflops=flops / seconds / 1e12,
        torch_tflops=flops / torch_seconds / 1e12,
    )
    return entry


def section_attention(record: Recorder, dry: bool) -> None:
    clock = Clock(dry)
    geometry = AttentionGeometry(dry)
    record.set("geometry", geometry.describe())
    if dry:
        points = (("decode", 1, 16), ("prefill", 1, 8))
    else:
        points = (
            ("decode", 1, 4096),
            ("decode", 8, 4096),
            ("decode", 32, 1024),
            ("decode", 64, 2048),
            ("prefill", 1, 512),
            ("prefill", 1, 2048),
            ("prefill", 4, 1024),
        )
    measure = {"decode": _decode_point, "prefill": _prefill_point}
    for kind, seqs, context in points:
        entry = {"kind": kind, "seqs": seqs, "context": context}
        try:
            entry.update(measure[kind](geometry, clock, seqs, context))
        except Exception as error:  # noqa: BLE001 - reported, not raised
            entry["error"] = error_text(error)
        record.append("attention", entry)


# -- section: model (child) ----------------------------------------------------


def smollm2_config(transformers, dry: bool):
    """SmolLM2-135M's configuration (a tiny one in a dry run)."""
    if dry:
        sizes = dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    else:
        sizes = dict(
            vocab_size=49152,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
        )
    return transformers.LlamaConfig(
        **sizes,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def _timed_steps(scheduler, steps: int, sync) -> float:
    """Seconds per `scheduler.step()` over `steps` steps (each step ends with
    the sampled tokens on the host)."""
    sync()
    begin = time.perf_counter()
    for _ in range(steps):
        scheduler.step()
    sync()
    return (time.perf_counter() - begin) / steps


def _ours_decode(model, batch, steps, prompt_len, rng, clock) -> dict:
    """Decode tokens/s of `batch` sequences stepping together."""
    from infini.ops.models import Scheduler

    entry = {"batch": batch, "steps": steps}
    try:
        scheduler = Scheduler(model)
        vocab = model.config.vocab_size
        for _ in range(batch):
            scheduler.add(rng.integers(0, vocab, prompt_len).tolist(), steps + 2, ())
        scheduler.step()  # prefill
        scheduler.step()  # the first decode step builds the decode operators
        seconds = _timed_steps(scheduler, steps, clock.sync)
        while not scheduler.idle:
            scheduler.step()
        entry.update(step_s=seconds, tokens_per_s=batch / seconds)
    except Exception as error:  # noqa: BLE001
        entry["error"] = error_text(error)
    return entry


def _ours_prefill(model, prefill, rng, clock, dry) -> dict:
    """Prefill tokens/s of one `prefill`-token prompt (one step)."""
    from infini.ops.models import Scheduler

    entry = {"prefill": prefill}
    try:
        scheduler = Scheduler(model)
        times = []
        for _ in range(1 if dry else 6):
            prompt = rng.integers(0, model.config.vocab_size, prefill).tolist()
            scheduler.add(prompt, 1, ())
            times.append(_timed_steps(scheduler, 1, clock.sync))
        # The first prefill builds its operators; the rest are the figure.
        seconds = statistics.median(times[1:] or times)
        entry.update(prefill_s=seconds, tokens_per_s=prefill / seconds)
    except Exception as error:  # noqa: BLE001
        entry["error"] = error_text(error)
    return entry


def section_model(record: Recorder, dry: bool) -> None:
    import numpy as np
    import torch
    import transformers

    from infini.ops.models import LlamaModel, Scheduler
    from tests.test_model_llama import checkpoint_from_transformers

    device = device_name(dry)
    clock = Clock(dry)
    torch.manual_seed(0)
    config = smollm2_config(transformers, dry)
    reference = transformers.LlamaForCausalLM(config).eval()
    checkpoint = checkpoint_from_transformers(reference)
    reference = reference.to(device)
    record.set(
        "config",
        {key: getattr(config, key) for key in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads")},
    )  # fmt: skip
    rng = np.random.default_rng(0)
    vocab = config.vocab_size
    prompt_len, new_tokens = (5, 3) if dry else (16, 32)

    # Greedy tokens in float32: ours against transformers' `generate`.
    prompt = rng.integers(0, vocab, prompt_len).tolist()
    entry = {"prompt": prompt_len, "new_tokens": new_tokens}
    try:
        model = LlamaModel(
            checkpoint,
            "float32",
            max_seqs=1,
            max_tokens=64,
            max_seq_len=prompt_len + new_tokens + 1,
            device=device,
        )
        scheduler = Scheduler(model)
        sequence = scheduler.add(prompt, new_tokens, ())
        rows = []
        while not scheduler.idle:
            scheduler.step()
            rows.append(scheduler.last_logits[0].to("cpu", torch.float32, copy=True))
        with torch.no_grad():
            ids = torch.tensor([prompt], device=device)
            generated = reference.generate(
                ids,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )[0, prompt_len:].tolist()
            forced = reference(torch.tensor([sequence.tokens], device=device)).logits
        expected = forced[0, prompt_len - 1 : prompt_len - 1 + new_tokens].float().cpu()
        ours = torch.stack(rows)
        matches = sum(a == b for a, b in zip(sequence.output, generated))
        entry.update(
            ours=sequence.output,
            transformers=generated,
            identical=sequence.output == generated,
            matching=matches,
            max_logits_error=float((ours - expected).abs().max()),
        )
        del model, scheduler
    except Exception as error:  # noqa: BLE001
        entry["error"] = error_text(error)
    record.set("greedy_float32", entry)

    # Speed in bfloat16 (float32 in a dry run: the interpreter's bfloat16
    # arithmetic is emulated and slow).
    dtype = torch.float32 if dry else torch.bfloat16
    dtype_name = str(dtype).removeprefix("torch.")
    steps, prefill, batches = (1, 8, (2,)) if dry else (32, 512, (1, 8))
    prompt_len = 4 if dry else 16
    reference = reference.to(dtype)
    record.set("speed_dtype", dtype_name)
    try:
        model = LlamaModel(
            checkpoint,
            dtype_name,
            max_seqs=8,
            max_tokens=prefill,
            max_seq_len=prefill + steps + 8,
            device=device,
        )
    except Exception as error:  # noqa: BLE001
        record.append("ours", {"error": error_text(error)})
        model = None
    if model is not None:
        for batch in batches:
            record.append(
                "ours", _ours_decode(model, batch, steps, prompt_len, rng, clock)
            )
        record.append("ours", _ours_prefill(model, prefill, rng, clock, dry))
        del model

    # transformers on the same weights: `generate` decode time is the time of
    # `1 + steps` new tokens minus that of 1.
    entry = {"batch": 1, "steps": steps}
    try:
        ids = torch.tensor([rng.integers(0, vocab, prompt_len).tolist()], device=device)

        def generate(count):
            with torch.no_grad():
                reference.generate(
                    ids,
                    max_new_tokens=count,
                    min_new_tokens=count,
                    do_sample=False,
                    pad_token_id=0,
                )

        one, many = clock.compare(lambda: generate(1), lambda: generate(1 + steps))
        seconds = (many - one) / steps
        entry.update(step_s=seconds, tokens_per_s=1 / seconds)
    except Exception as error:  # noqa: BLE001
        entry["error"] = error_text(error)
    record.append("transformers", entry)
    entry = {"prefill": prefill}
    try:
        ids = torch.tensor([rng.integers(0, vocab, prefill).tolist()], device=device)

        def forward():
            with torch.no_grad():
                reference(ids)

        (seconds,) = clock.compare(forward)
        entry.update(prefill_s=seconds, tokens_per_s=prefill / seconds)
    except Exception as error:  # noqa: BLE001
        entry["error"] = error_text(error)
    record.append("transformers", entry)


CHILD_SECTIONS = {
    "environment": section_environment,
    "products": section_products,
    "memory": section_memory,
    "attention": section_attention,
    "model": section_model,
}


def child_main(section: str, result: Path, dry: bool) -> int:
    """Runs one measuring section in this process."""
    sys.path.insert(0, str(REPO))
    record = Recorder(result)
    record.set("started", time.time())
    try:
        CHILD_SECTIONS[section](record, dry)
    except Exception as error:  # noqa: BLE001 - the parent reports it
        traceback.print_exc()
        record.set("error", error_text(error))
        return 1
    record.set("finished", time.time())
    return 0


# -- the parent: install, tests, orchestration ---------------------------------


class Run:
    """The parent's state: the global deadline, the log and the report."""

    def __init__(self, arguments) -> None:
        self.arguments = arguments
        self.dry = arguments.dry_run
        self.start = time.monotonic()
        self.deadline = self.start + arguments.deadline
        self.out = Path(arguments.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="infini-device-"))
        self.log_path = self.out / "run.log"
        self.log_path.write_text("")
        self.lock = threading.Lock()
        self.report = {
            "dry_run": self.dry,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "deadline_s": arguments.deadline,
            "sections": {},
        }
        self.environment = dict(os.environ)
        self.environment["PYTHONUNBUFFERED"] = "1"
        paths = [str(REPO)]
        if self.dry:
            # The sources of this tree, which the generated manifest names
            # (an installed package may be older or newer).
            self.environment["INFINI_OPS_TRITON_INTERPRET"] = "1"
            paths.insert(0, str(REPO / "src"))
        existing = self.environment.get("PYTHONPATH")
        self.environment["PYTHONPATH"] = os.pathsep.join(
            paths + ([existing] if existing else [])
        )

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def budget(self, section: str) -> float:
        cap = CAPS[section][1 if self.dry else 0]
        return min(cap, self.left() - RESERVE)

    def write_log(self, text: str) -> None:
        with self.lock, self.log_path.open("a") as stream:
            stream.write(text)

    def command(self, command, timeout: float, cwd=REPO) -> tuple[int | None, str]:
        """Runs `command` (its own process group, killed at `timeout`);
        returns (exit code or None when killed, output)."""
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=self.environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=max(timeout, 1.0))
            code = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            code = None
        self.write_log(f"\n$ {' '.join(map(str, command))}  [exit {code}]\n{output}")
        return code, output

    # -- sections run by the parent ----------------------------------------------

    def section_install(self, budget: float) -> dict:
        result = {}
        if self.dry:
            result["skipped"] = (
                "dry run: the package importable here, with a manifest generated "
                "from this source tree"
            )
            begin = time.monotonic()
            manifest = self.scratch / "manifest.json"
            code, output = self.command(
                [
                    sys.executable,
                    "scripts/generate_manifest.py",
                    "--source-dir",
                    str(REPO),
                    "--output",
                    str(manifest),
                    "--devices",
                    "cpu;nvidia",
                    "--with-triton",
                ],
                budget,
            )
            if code != 0:
                raise RuntimeError(f"generate_manifest.py failed: {output[-400:]}")
            self.environment["INFINI_OPS_MANIFEST"] = str(manifest)
            result["manifest_s"] = round(time.monotonic() - begin, 1)
            return result
        end = time.monotonic() + budget
        wheels = self._missing_wheels()
        result["wheels"] = [wheel.name for wheel in wheels]
        if wheels:
            code, output = self.command(
                [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps"]
                + ["--find-links", str(WHEELS)]
                + [str(wheel) for wheel in wheels],
                end - time.monotonic(),
            )
            result["wheels_exit"] = code
        ninetoothed = importlib.util.find_spec("ninetoothed") is not None
        if not ninetoothed:
            # Installed just now: a fresh interpreter sees it.
            code, _ = self.command(
                [sys.executable, "-c", "import ninetoothed"], end - time.monotonic()
            )
            ninetoothed = code == 0
        defines = {
            "WITH_CPU": "ON",
            "WITH_NVIDIA": "ON",
            "WITH_TRITON": "ON",
            "WITH_TORCH": "ON",
            "WITH_NINETOOTHED": "ON" if ninetoothed else "OFF",
            "INFINI_OPS_PRECOMPILE": "none",
        }
        result["defines"] = defines
        begin = time.monotonic()
        command = [sys.executable, "-m", "pip", "install", "--no-build-isolation"]
        command += ["--no-deps", "."]
        for name, value in defines.items():
            command += ["-C", f"cmake.define.{name}={value}"]
        code, output = self.command(command, end - time.monotonic())
        result["pip_s"] = round(time.monotonic() - begin, 1)
        result["pip_exit"] = code
        if code != 0:
            result["pip_tail"] = output[-1500:]
            raise RuntimeError(f"pip install exited with {code}")
        return result

    def _missing_wheels(self) -> list[Path]:
        chosen = []
        for wheel in sorted(WHEELS.glob("*.whl")):
            distribution = wheel.name.split("-")[0].replace("_", "-").lower()
            if distribution not in TRAVELLING:
                continue
            try:
                importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                chosen.append(wheel)
        return chosen

    def _manifest(self) -> dict:
        path = self.environment.get("INFINI_OPS_MANIFEST")
        if path is None:
            code, output = self.command(
                [
                    sys.executable,
                    "-c",
                    "import infini.ops.core.manifest as m, sys; "
                    "sys.stdout.write(str(m.MANIFEST_PATH))",
                ],
                60,
                cwd=self.scratch,
            )
            if code != 0:
                raise RuntimeError(f"cannot locate the manifest: {output[-400:]}")
            path = output.strip().splitlines()[-1]
        return json.loads(Path(path).read_text())

    def test_files(self) -> list[tuple[str, list[str]]]:
        """(operator or file label, pytest arguments) in running order."""
        if self.dry:
            return [
                (
                    "silu",
                    ["tests/test_silu.py", "-k", "in_place or rejects_bad_arguments"],
                )
            ]
        files = []
        for name in cuda_like_operators(self._manifest()):
            path = REPO / "tests" / f"test_{name}.py"
            if path.is_file():
                files.append((name, [str(path.relative_to(REPO))]))
        files.append(
            (
                "triton_native",
                ["tests/test_triton_native.py", "-k", "callers_stream or missing_cuda"],
            )
        )
        # Last: it also runs the model on the CPU path (Numba compiles).
        files.append(("model_device", ["tests/test_model_device.py"]))
        return files

    def section_tests(self, budget: float) -> dict:
        end = time.monotonic() + budget
        files = self.test_files()
        workers = 1 if self.dry else max(1, min(14, (os.cpu_count() or 2) - 2))
        per_file = 45 if self.dry else 150
        self.environment["INFINI_OPS_DEVICE_TEST_SLOTS"] = self.arguments.test_slots
        results: dict = {}

        def one(item):
            label, arguments = item
            left = end - time.monotonic()
            if left < 5:
                results[label] = {"status": "not run (deadline)"}
                return
            junit = self.scratch / f"junit-{label}.xml"
            command = [sys.executable, "-m", "pytest", *arguments, "-q"]
            command += [
                "-p",
                "no:cacheprovider",
                "-p",
                "benchmarks.device.pytest_slots",
            ]
            command += ["--devices", "nvidia", f"--junitxml={junit}"]
            begin = time.monotonic()
            code, output = self.command(command, min(per_file, left))
            summary = parse_junit(junit) if junit.exists() else {}
            summary["seconds"] = round(time.monotonic() - begin, 1)
            summary["exit"] = code
            if code is None:
                summary["status"] = "timed out"
            elif not junit.exists():
                summary["status"] = "no result"
                summary["tail"] = output[-800:]
            results[label] = summary

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, files))
        order = [label for label, _ in files]
        return {
            "slots": self.arguments.test_slots,
            "workers": workers,
            "files": {label: results.get(label, {}) for label in order},
        }

    # -- orchestration ------------------------------------------------------------

    def run_section(self, section: str) -> None:
        budget = self.budget(section)
        entry = {"budget_s": round(budget, 1)}
        self.report["sections"][section] = entry
        if budget < MIN_START:
            entry["status"] = "not started (global deadline)"
            log(f"{section}: not started, {self.left():.0f} s left")
            return
        log(f"{section}: up to {budget:.0f} s")
        begin = time.monotonic()
        try:
            if section == "install":
                entry["result"] = self.section_install(budget)
                entry["status"] = "done"
            elif section == "tests":
                entry["result"] = self.section_tests(budget)
                entry["status"] = "done"
            else:
                result_path = self.scratch / f"{section}.json"
                command = [sys.executable, str(Path(__file__).resolve())]
                command += ["--section", section, "--result", str(result_path)]
                command += ["--out", str(self.out)] + (
                    ["--dry-run"] if self.dry else []
                )
                code, _ = self.command(command, budget)
                entry["result"] = (
                    json.loads(result_path.read_text()) if result_path.exists() else {}
                )
                entry["status"] = (
                    "done"
                    if code == 0
                    else "stopped at its cap"
                    if code is None
                    else f"failed (exit {code})"
                )
        except Exception as error:  # noqa: BLE001 - reported, the run goes on
            entry["status"] = "failed"
            entry["error"] = error_text(error)
            self.write_log(traceback.format_exc())
        entry["seconds"] = round(time.monotonic() - begin, 1)
        log(f"{section}: {entry['status']} in {entry['seconds']} s")

    def problems(self) -> list[str]:
        """Sections that failed and measurements that raised, in words
        (sections the deadline left out or stopped at their cap are not
        problems: the report says so)."""
        found = []
        for name, entry in self.report["sections"].items():
            if entry.get("status", "").startswith("failed"):
                found.append(f"{name}: {entry.get('error') or entry['status']}")
            result = entry.get("result") or {}
            for key, value in result.items():
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if isinstance(item, dict) and "error" in item:
                        found.append(f"{name}/{key}: {item['error']}")
            if result.get("error") and isinstance(result["error"], str):
                found.append(f"{name}: {result['error']}")
            for label, file in (result.get("files") or {}).items():
                if file.get("failed") or file.get("errors"):
                    found.append(f"tests/{label}: {file.get('failures')}")
        return found

    def finish(self) -> None:
        self.report["seconds"] = round(time.monotonic() - self.start, 1)
        self.report["targets"] = evaluate_targets(self.report)
        (self.out / "report.json").write_text(
            json.dumps(self.report, indent=1, default=str)
        )
        text = render(self.report)
        (self.out / "report.md").write_text(text)
        if self.arguments.write_results:
            TEMPLATE.write_text(text)
        log(f"report: {self.out / 'report.md'} ({self.report['seconds']} s)")


def parse_junit(path: Path) -> dict:
    """Counts and the first failures of one pytest JUnit XML file."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "errors"}.get(
                    child.tag, "skipped"
                )
                if child.tag != "skipped" and len(failures) < 3:
                    message = (child.get("message") or "").splitlines()
                    failures.append(
                        f"{case.get('name')}: {message[0][:200] if message else ''}"
                    )
                break
        counts[outcome] += 1
    counts["failures"] = failures
    return counts


# -- targets and the report ----------------------------------------------------


def _result(report: dict, section: str) -> dict:
    return report["sections"].get(section, {}).get("result") or {}


def evaluate_targets(report: dict) -> list[dict]:
    """Each target of issue 21: met, missed (with the figure), or not
    measured."""
    targets = []
    dry = report["dry_run"]

    def add(name, met, detail):
        if dry:
            status = "not evaluated (dry run on a CPU)"
        elif met is None:
            status = "not measured"
        else:
            status = "met" if met else "missed"
        targets.append({"target": name, "status": status, "detail": detail})

    memory = [e for e in _result(report, "memory").get("operators", []) if "ratio" in e]
    if memory:
        misses = [
            f"{e['operator']} {e['case']} ({e['of_copy']:.0%} of copy, "
            f"{e['ratio']:.2f}x torch)"
            for e in memory
            if e["of_copy"] < MEMORY_TARGET or e["ratio"] < 1.0
        ]
        detail = f"{len(memory) - len(misses)} of {len(memory)} cases met"
        add(
            "memory-bound operators >= 80% of copy bandwidth and >= torch",
            not misses,
            detail + (": missed " + "; ".join(misses[:12]) if misses else ""),
        )
    else:
        add("memory-bound operators >= 80% of copy bandwidth and >= torch", None, "")
    gemm = [
        e
        for e in _result(report, "products").get("products", [])
        if e["operator"] == "gemm"
        and e["dtype"] == "bfloat16"
        and e["shape"] == [4096, 4096, 4096]
        and "ratio" in e
    ]
    add(
        "bf16 gemm >= 80% of torch.mm at 4096^3",
        gemm[0]["ratio"] >= GEMM_TARGET if gemm else None,
        f"{gemm[0]['ratio']:.0%} of torch.mm" if gemm else "",
    )
    decode = [
        e
        for e in _result(report, "attention").get("attention", [])
        if e["kind"] == "decode" and "ratio" in e
    ]
    add(
        "paged decode attention at least as fast as SDPA",
        all(e["ratio"] >= 1.0 for e in decode) if decode else None,
        ", ".join(
            f"{e['seqs']}x{e['context']}: {e['ratio']:.2f}x SDPA" for e in decode
        ),
    )
    model = _result(report, "model")
    ours = {e.get("batch"): e for e in model.get("ours", []) if "tokens_per_s" in e}
    theirs = [
        e
        for e in model.get("transformers", [])
        if e.get("batch") == 1 and "tokens_per_s" in e
    ]
    if 1 in ours and theirs:
        ratio = ours[1]["tokens_per_s"] / theirs[0]["tokens_per_s"]
        add(
            "model decode batch 1 >= 1.5x transformers' generate",
            ratio >= DECODE_B1_TARGET,
            f"{ratio:.2f}x",
        )
    else:
        add("model decode batch 1 >= 1.5x transformers' generate", None, "")
    if 1 in ours and 8 in ours:
        ratio = ours[8]["tokens_per_s"] / ours[1]["tokens_per_s"]
        add("model decode batch 8 >= 5x our batch 1", ratio >= DECODE_B8_TARGET,
            f"{ratio:.2f}x")  # fmt: skip
    else:
        add("model decode batch 8 >= 5x our batch 1", None, "")
    greedy = model.get("greedy_float32", {})
    add(
        "float32 greedy tokens identical to transformers",
        greedy.get("identical"),
        f"{greedy.get('matching')} of {greedy.get('new_tokens')} tokens"
        if "identical" in greedy
        else greedy.get("error", ""),
    )
    return targets


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _status_line(report: dict, section: str) -> str:
    entry = report["sections"].get(section)
    if entry is None:
        return "Not run."
    line = f"Section status: {entry.get('status')} ({entry.get('seconds', 0)} s"
    line += f" of {entry.get('budget_s')} s)."
    if entry.get("error"):
        line += f" Error: `{entry['error']}`"
    inner = (entry.get("result") or {}).get("error")
    if inner:
        line += f" Error: `{inner}`"
    return line


def _cell(entry: dict, key: str, form: str) -> str:
    return format(entry[key], form) if key in entry else entry.get("error", "-")[:80]


def render_environment(report: dict) -> str:
    result = _result(report, "environment")
    rows = [[name, value] for name, value in result.get("versions", {}).items()]
    gpu = result.get("gpu")
    if gpu:
        rows += [[f"GPU {key}", value] for key, value in gpu.items()]
    if result.get("nvidia_smi"):
        rows.append(["nvidia-smi", result["nvidia_smi"]])
    build = result.get("build", {})
    rows += [[f"build {key}", value] for key, value in build.items()]
    install = _result(report, "install")
    rows += [[f"install {key}", value] for key, value in install.items()]
    return "\n\n".join(
        [
            _status_line(report, "environment"),
            _status_line(report, "install"),
            _table(["what", "value"], rows),
        ]
    )


def render_tests(report: dict) -> str:
    result = _result(report, "tests")
    rows, totals = [], {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for label, entry in result.get("files", {}).items():
        for key in totals:
            totals[key] += entry.get(key, 0)
        rows.append(
            [
                label,
                entry.get("passed", "-"),
                entry.get("failed", "-"),
                entry.get("errors", "-"),
                entry.get("skipped", "-"),
                entry.get("seconds", "-"),
                entry.get("status", "")
                + " ".join(entry.get("failures", []))[:300].replace("|", "/"),
            ]
        )
    summary = ", ".join(f"{value} {key}" for key, value in totals.items())
    return "\n\n".join(
        [
            _status_line(report, "tests"),
            f"Slots: {result.get('slots', '-')}; totals: {summary}.",
            _table(
                ["operator", "passed", "failed", "errors", "skipped", "s", "notes"],
                rows,
            ),
        ]
    )


def render_products(report: dict) -> str:
    rows = [
        [
            e["operator"],
            e["dtype"],
            "x".join(map(str, e["shape"])),
            _cell(e, "ours_tflops", ".1f"),
            _cell(e, "torch_tflops", ".1f"),
            _cell(e, "ratio", ".2f"),
            _cell(e, "max_error", ".2g"),
        ]
        for e in _result(report, "products").get("products", [])
    ]
    header = ["operator", "dtype", "M x N x K", "ours TFLOP/s", "torch.mm TFLOP/s"]
    header += ["ours / torch", "max error vs fp32"]
    return _status_line(report, "products") + "\n\n" + _table(header, rows)


def render_memory(report: dict) -> str:
    result = _result(report, "memory")
    copy = result.get("copy", {})
    rows = [
        [
            e["operator"],
            e.get("case", "").replace("|", "/"),
            _cell(e, "ours_gbs", ".0f"),
            _cell(e, "torch_gbs", ".0f"),
            _cell(e, "of_copy", ".0%"),
            _cell(e, "ratio", ".2f"),
        ]
        for e in result.get("operators", [])
    ]
    copy_line = (
        f"Device-to-device copy (bytes read + written): {copy['gbs']:.0f} GB/s."
        if copy
        else "Copy bandwidth: not measured."
    )
    header = ["operator", "case (bfloat16)", "ours GB/s", "torch GB/s", "of copy"]
    header += ["ours / torch"]
    return "\n\n".join(
        [_status_line(report, "memory"), copy_line, _table(header, rows)]
    )


def render_attention(report: dict) -> str:
    result = _result(report, "attention")
    rows = [
        [
            e["kind"],
            e["seqs"],
            e["context"],
            _cell(e, "ours_s", ".3g"),
            _cell(e, "torch_s", ".3g"),
            _cell(e, "ratio", ".2f"),
            _cell(e, "max_error", ".2g"),
        ]
        for e in result.get("attention", [])
    ]
    geometry = result.get("geometry", {})
    header = ["kind", "seqs", "tokens", "ours s", "SDPA s", "SDPA / ours", "max error"]
    return "\n\n".join(
        [
            _status_line(report, "attention"),
            f"Geometry: {geometry}." if geometry else "",
            _table(header, rows),
        ]
    )


def render_model(report: dict) -> str:
    result = _result(report, "model")
    greedy = result.get("greedy_float32", {})
    if "identical" in greedy:
        greedy_line = (
            f"Greedy float32, {greedy['new_tokens']} new tokens after "
            f"{greedy['prompt']}: identical to transformers: "
            f"{greedy['identical']} ({greedy['matching']} matching); max logits "
            f"error (teacher-forced) {greedy['max_logits_error']:.2g}."
        )
    else:
        greedy_line = f"Greedy float32: {greedy.get('error', 'not measured')}."
    rows = []
    for runner in ("ours", "transformers"):
        for e in result.get(runner, []):
            what = (
                f"decode batch {e['batch']}"
                if "batch" in e
                else "prefill"
                if "prefill" in e
                else "the model"
            )
            size = e.get("steps", e.get("prefill"))
            rows.append(
                [runner, what, size, _cell(e, "tokens_per_s", ".1f")]
            )  # fmt: skip
    return "\n\n".join(
        [
            _status_line(report, "model"),
            f"Configuration: {result.get('config', '-')}; speed in "
            f"{result.get('speed_dtype', '-')}.",
            greedy_line,
            _table(["runner", "what", "steps / tokens", "tokens/s"], rows),
        ]
    )


def render_targets(report: dict) -> str:
    rows = [[t["target"], t["status"], t["detail"]] for t in report["targets"]]
    return _table(["target", "status", "detail"], rows)


def render_status(report: dict) -> str:
    environment = _result(report, "environment")
    gpu = (environment.get("gpu") or {}).get("name")
    if report["dry_run"]:
        return (
            f"**Dry run** ({report['started']}, {report['seconds']} s): the "
            "script on a CPU through Triton's interpreter with tiny sizes. "
            "**Nothing here was measured on a GPU.**"
        )
    return (
        f"Measured on **{gpu or 'an unknown device'}** on {report['started']} by "
        f"`benchmarks/device/run.py` ({report['seconds']} s of a "
        f"{report['deadline_s']} s deadline)."
    )


RENDERERS = {
    "status": render_status,
    "environment": render_environment,
    "tests": render_tests,
    "products": render_products,
    "memory": render_memory,
    "attention": render_attention,
    "model": render_model,
    "targets": render_targets,
}
BLOCK = re.compile(r"(<!-- begin:(\w+) -->\n)(.*?)(<!-- end:\2 -->)", re.DOTALL)


def render(report: dict) -> str:
    """The template with every marked block replaced by its section."""
    template = TEMPLATE.read_text()

    def fill(match):
        renderer = RENDERERS.get(match.group(2))
        if renderer is None:
            return match.group(0)
        try:
            body = renderer(report)
        except Exception as error:  # noqa: BLE001 - a report is always written
            body = f"(could not render: `{error_text(error)}`)"
        return f"{match.group(1)}{body}\n{match.group(4)}"

    return BLOCK.sub(fill, template)


# -- entry ---------------------------------------------------------------------


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the report")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="on a CPU through Triton's interpreter, tiny sizes, no install",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        help="seconds for the whole run (default: 510, or 115 for --dry-run)",
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)}",
    )
    parser.add_argument(
        "--test-slots",
        default="0",
        help="implementation slots the tests run ('0', '0,8' or 'all')",
    )
    parser.add_argument(
        "--write-results",
        action="store_true",
        help="also write the filled template to benchmarks/results/h200.md",
    )
    parser.add_argument("--section", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.deadline is None:
        arguments.deadline = 115.0 if arguments.dry_run else 510.0
    return arguments


def main(argv=None) -> int:
    arguments = parse_arguments(argv)
    if arguments.section:
        return child_main(arguments.section, Path(arguments.result), arguments.dry_run)
    run = Run(arguments)
    chosen = [name.strip() for name in arguments.sections.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"unknown sections: {', '.join(unknown)}")
    if arguments.dry_run and "install" not in chosen:
        chosen.append("install")  # it generates the interpreter's manifest
    log(f"{'dry run' if run.dry else 'device run'}: {', '.join(chosen)}")
    try:
        for section in SECTIONS:
            if section in chosen:
                run.run_section(section)
    finally:
        run.finish()
    problems = run.problems()
    for problem in problems:
        log(f"problem: {problem}")
    # A dry run guards the script itself: any error fails it. A device run
    # has done its job once the report is written.
    return 1 if problems and run.dry else 0


if __name__ == "__main__":
    sys.exit(main())
