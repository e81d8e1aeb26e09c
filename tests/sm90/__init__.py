"""Compiling the CUDA-like kernels for sm_90 without a GPU, and what their
machine code says about speed before a GPU is available.

Each family module beside this one (`elementwise.py`, `rows.py`, ...) holds
`EXAMPLES`: operator name -> a list of `Example`, each the arguments of one
call on an NVIDIA device (as `TensorMeta`, no data). `tests/test_triton_native.py`
builds every example's operator as on a GPU, compiles each of its launches
for sm_90 with Triton's bundled `ptxas`, and checks (docs/architecture.md,
"Static checks of the CUDA-like kernels"):

- no kernel spills registers (`ptxas -v`);
- a `memory` example (contiguous, 16-byte-aligned float operands) has
  128-bit global loads in its PTX (`ld.global.v4.b32`, `.v2.b64`, ...);
- a `product` example has tensor-core instructions (`mma`/`wgmma`).

`python -m tests.sm90` prints the same facts as a table (registers, spills,
shared memory, the widest global load and store) for every example.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

from infini.ops.core.devices import Device
from infini.ops.core.tensor import TensorMeta

NVIDIA = Device("nvidia", 0)

FAMILIES = (
    "elementwise",
    "rows",
    "attention",
    "caches",
    "products",
    "convolution",
    "routing",
    "moe",
    "sampling",
    "ggml",
)

# What a check expects of an example's machine code.
MEMORY = "memory"  # streams contiguous float data: 128-bit global loads
PRODUCT = "product"  # a tiled product: tensor-core instructions
OTHER = "other"  # only compiles, without spills


@dataclass(frozen=True)
class Example:
    """One call's arguments (a function returning the argument dict, so
    that every test builds fresh metadata) and what its code must show."""

    arguments: Callable[[], dict]
    kind: str = OTHER
    label: str = ""


def meta(shape, dtype="float32", strides=None) -> TensorMeta:
    """A tensor of `shape` on the NVIDIA device (contiguous by default)."""
    if strides is None:
        strides, running = [], 1
        for size in reversed(shape):
            strides.insert(0, running)
            running *= size
    return TensorMeta(tuple(shape), tuple(strides), dtype, NVIDIA)


def all_examples() -> dict[str, list[Example]]:
    """Every family's examples, by operator name."""
    examples: dict[str, list[Example]] = {}
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"tests.sm90.{family}")
        except ModuleNotFoundError as error:
            if error.name != f"tests.sm90.{family}":
                raise
            continue
        for name, entries in module.EXAMPLES.items():
            if name in examples:
                raise ValueError(f"`{name}` has examples in two families")
            examples[name] = list(entries)
    return examples


# -- inspecting compiled kernels ------------------------------------------------

_LOAD = re.compile(r"\bld\.global(?:\.[a-z0-9_:]+)*?\.v(\d)\.(?:[bfsu])(\d+)")
_SCALAR_LOAD = re.compile(r"\bld\.global(?:\.[a-z0-9_:]+)*?\.(?:[bfsu])(\d+)\b")
_STORE = re.compile(r"\bst\.global(?:\.[a-z0-9_:]+)*?\.v(\d)\.(?:[bfsu])(\d+)")
_SCALAR_STORE = re.compile(r"\bst\.global(?:\.[a-z0-9_:]+)*?\.(?:[bfsu])(\d+)\b")
_TENSOR_CORE = re.compile(r"\b(?:wgmma\.mma_async|mma\.sync)\b")
_USAGE = re.compile(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?", re.DOTALL)
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def widest_access(ptx: str, vector, scalar) -> int:
    """The widest global access in `ptx`, in bits (0 when there is none)."""
    widest = 0
    for count, bits in vector.findall(ptx):
        widest = max(widest, int(count) * int(bits))
    for bits in scalar.findall(ptx):
        widest = max(widest, int(bits))
    return widest


@dataclass(frozen=True)
class KernelReport:
    name: str
    registers: int
    spill_bytes: int
    shared_bytes: int
    widest_load: int
    widest_store: int
    tensor_cores: bool


def _ptxas_path() -> str:
    """Triton's bundled `ptxas` for sm_90 (its lookup moved between versions:
    `get_ptxas(arch)` in 3.9, `get_ptxas()` before)."""
    from triton.backends.nvidia import compiler

    try:
        tool = compiler.get_ptxas(90)
    except TypeError:
        tool = compiler.get_ptxas()
    return tool.path if hasattr(tool, "path") else tool[0]


def ptxas_usage(ptx: str, arch: str = "sm_90a") -> tuple[int, int]:
    """`(registers, spilled bytes)` of the kernel in `ptx`, from `ptxas -v`
    (Triton's bundled one)."""
    executable = _ptxas_path()
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run(
            [executable, "-v", f"-arch={arch}", str(source), "-o", str(source) + ".o"],
            capture_output=True,
            text=True,
            check=True,
        )
    text = result.stdout + result.stderr
    registers = _USAGE.search(text)
    spills = _SPILLS.search(text)
    return (
        int(registers.group(1)) if registers else 0,
        sum(int(value) for value in spills.groups()) if spills else 0,
    )


def inspect_compiled(compiled) -> KernelReport:
    """The facts the static checks read, for one compiled kernel."""
    ptx = compiled.asm["ptx"]
    registers, spills = ptxas_usage(ptx)
    return KernelReport(
        name=compiled.metadata.name,
        registers=registers,
        spill_bytes=spills,
        shared_bytes=int(getattr(compiled.metadata, "shared", 0)),
        widest_load=widest_access(ptx, _LOAD, _SCALAR_LOAD),
        widest_store=widest_access(ptx, _STORE, _SCALAR_STORE),
        tensor_cores=bool(_TENSOR_CORE.search(ptx)),
    )


# -- planning as on a GPU, without one ---------------------------------------------


def implementation_class(op: str):
    """The CUDA-like slot-0 class of `op` (`native/cuda/ops/<op>.py`)."""
    module = importlib.import_module(f"infini.ops.native.cuda.ops.{op}")
    (cls,) = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and getattr(value, "implementation_slot", None) == 0
        and "nvidia" in getattr(value, "implementation_devices", ())
        and getattr(value, "__module__", None) == module.__name__
    ]
    return cls


@contextmanager
def planning_without_a_gpu(op: str):
    """Builds operators as on a GPU on a machine without one: no device
    check, device tables on the CPU, and no compile at bind time (the
    launches are compiled by `compile_launches` instead)."""
    from infini.ops.native.cuda import elementwise
    from infini.ops.runtime import triton as runtime

    module = importlib.import_module(f"infini.ops.native.cuda.ops.{op}")
    planners = [runtime, elementwise, module]
    # Family modules a kernel module plans through import the helpers by name.
    for name in dir(module):
        value = getattr(module, name)
        if getattr(value, "__name__", "").startswith("infini.ops.native.cuda."):
            planners.append(value)
    with ExitStack() as stack:
        stack.enter_context(
            patch.object(runtime, "uses_direct_launch", lambda device: False)
        )
        for planner in planners:
            if hasattr(planner, "torch_device"):
                stack.enter_context(
                    patch.object(planner, "torch_device", lambda device: "cpu")
                )
            if hasattr(planner, "require_device"):
                stack.enter_context(
                    patch.object(planner, "require_device", lambda *arguments: None)
                )
        yield


def launches_of(value, depth=0, seen=None):
    """Every `Launch` an operator holds (in its attributes, lists and dicts,
    two levels deep)."""
    from infini.ops.runtime.triton import Launch

    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, Launch):
        yield value
    elif depth > 2:
        return
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from launches_of(item, depth + 1, seen)
    elif isinstance(value, dict):
        for item in value.values():
            yield from launches_of(item, depth + 1, seen)
    elif hasattr(value, "__dict__"):
        for item in vars(value).values():
            yield from launches_of(item, depth + 1, seen)


def compile_example(op: str, example: Example):
    """The operator built for `example` and its launches compiled for
    sm_90: a list of Triton `CompiledKernel`s."""
    import triton
    from triton.backends.compiler import GPUTarget

    from infini.ops.core.operator import Arguments
    from infini.ops.runtime import triton as runtime

    cls = implementation_class(op)
    with planning_without_a_gpu(op):
        operator = cls(Arguments(example.arguments(), NVIDIA, 0))
    launches = list(launches_of(operator))
    if not launches:
        raise AssertionError(f"`{cls.__name__}` holds no `Launch`")
    target = GPUTarget("cuda", 90, 32)
    return [
        triton.compile(
            runtime.ast_source(
                launch.kernel.fn, launch.arguments, launch.constexprs, True
            ),
            target=target,
            options=launch.options,
        )
        for launch in launches
    ]
