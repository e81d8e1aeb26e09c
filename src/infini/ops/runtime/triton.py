"""Binding and launching Triton kernels on CUDA-like devices.

Shared by every backend whose kernels are written in Triton (the CUDA-like
native kernels under `native/cuda`, the Triton JIT backend under `triton`).

`Kernel(fn)` wraps a `@triton.jit` function whose runtime parameters come
first and whose `tl.constexpr` parameters come last. An operator binds it
once per geometry, when it is built::

    self._launch = KERNEL.bind(
        grid=(blocks,),
        arguments=(args.out, args.input, numel),  # TensorMeta marks a pointer
        constexprs={"BLOCK": 1024},
        device=self.device,
    )

and its `launch(stream, *tensors)` calls ``self._launch(stream, out, input)``
with the caller's tensors in pointer order. How the bound launch runs depends
on the device, decided once in `bind`:

- NVIDIA (`cuda` Triton backend): the kernel is compiled for the device when
  it is bound (Triton's compile cache makes that cheap after the first time)
  and each call hands the data pointers, the fixed scalars and the raw
  `stream` handle straight to the compiled kernel's launcher. Pointers are
  specialised on 16-byte alignment as Triton does; a second, unaligned
  variant is compiled the first time a call brings an unaligned pointer.
- Other CUDA-like platforms (their own Triton backends): `kernel[grid](...)`
  under the caller's stream, which torch's external stream wraps.
- `INFINI_OPS_TRITON_INTERPRET=1`: `kernel[grid](...)` on CPU tensors
  through Triton's interpreter. Everything else (planning, arguments, grids,
  staging) is the code that runs on GPUs.

A `stream` of 0 means the legacy default stream (docs/behaviour.md, "Streams"); a
non-zero `stream` is the raw handle the work is queued on. Torch work a launch needs
(staging copies) runs under `infini.ops.core.streams.stream_context`, which wraps the
handle as torch's external stream.

Triton itself is imported when a kernel is first compiled or launched, so
that a missing `triton` is reported with the fix (`triton_module`).
"""

from __future__ import annotations

import inspect
from functools import cache
from pathlib import Path

from infini.ops.core.cache_faults import report_damaged_entry
from infini.ops.core.devices import TORCH_DEVICE_TYPE_OF_PLATFORM, TRITON_INTERPRETER
from infini.ops.core.errors import OperatorError
from infini.ops.core.geometry import AliasGuard
from infini.ops.core.streams import stream_context
from infini.ops.core.tensor import TensorMeta
from infini.ops.runtime.cache import binary_problem

INTERPRETER = TRITON_INTERPRETER

# Triton's pointer element type of each InfiniOps dtype.
TRITON_TYPE = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
}


class Pointer:
    """A pointer parameter of a given dtype (`TensorMeta` works as well)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def triton_module():
    """The `triton` module, or a clear error when it is not installed."""
    try:
        import triton as module
    except ImportError as error:
        raise ImportError(
            "The CUDA-like kernels of InfiniOps are written in Triton, but "
            f"`triton` cannot be imported ({error}); install it "
            "(`pip install triton`)."
        ) from error
    return module


def torch_device(device) -> str:
    """The torch device string of an InfiniOps `Device` (CPU in interpreter mode)."""
    if INTERPRETER:
        return "cpu"
    return f"{TORCH_DEVICE_TYPE_OF_PLATFORM[device.platform]}:{device.index}"


def require_device(operator: str, device) -> None:
    """Fails clearly when the build's device is not present at run time."""
    if INTERPRETER:
        return
    import torch

    kind = TORCH_DEVICE_TYPE_OF_PLATFORM[device.platform]
    module = getattr(torch, kind, None)
    try:
        available = module is not None and module.is_available()
        count = module.device_count() if available else 0
    except Exception:  # a vendor module that cannot even probe
        available, count = False, 0
    if not available:
        raise OperatorError(
            operator,
            f"the tensors are on {device.platform} (torch device `{kind}`), but "
            f"no {device.platform} device is available to this process "
            f"(`torch.{kind}.is_available()` is False). Move the tensors to a "
            "device that exists, or run on the CPU.",
        )
    if device.index >= count:
        raise OperatorError(
            operator,
            f"the tensors are on {device}, but only {count} {device.platform} "
            "device(s) are available.",
        )


def _is_constexpr(parameter: inspect.Parameter) -> bool:
    annotation = parameter.annotation
    if isinstance(annotation, str):
        return annotation.rsplit(".", 1)[-1] == "constexpr"
    return getattr(annotation, "__name__", "") == "constexpr"


def python_function(fn):
    """The Python function under a `@triton.jit` (or interpreted) kernel."""
    while hasattr(fn, "fn"):
        fn = fn.fn
    return fn


@cache
def kernel_parameters(fn) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`(runtime names, constexpr names)` of a kernel, checking the order."""
    parameters = list(inspect.signature(python_function(fn)).parameters.values())
    runtime = [p.name for p in parameters if not _is_constexpr(p)]
    constexprs = [p.name for p in parameters if _is_constexpr(p)]
    names = [p.name for p in parameters]
    if names != runtime + constexprs:
        raise TypeError(
            f"kernel `{python_function(fn).__name__}` must list its `tl.constexpr` "
            "parameters after all runtime parameters"
        )
    return tuple(runtime), tuple(constexprs)


def scalar_token(value) -> tuple[str, bool]:
    """Triton's signature token of a scalar argument and whether it is the
    constant 1 (which Triton specialises into the kernel): ``i32``/``i64``/
    ``u64`` with ``:16``-style divisibility as an attribute, ``fp32`` for
    floats, ``u1`` for booleans."""
    if isinstance(value, bool):
        return "u1", False
    if isinstance(value, int):
        if value == 1:
            return "constexpr", True
        if -(2**31) <= value < 2**31:
            return "i32", False
        if -(2**63) <= value < 2**63:
            return "i64", False
        return "u64", False
    if isinstance(value, float):
        return "fp32", False
    raise TypeError(f"unsupported kernel scalar {value!r}")


def ast_source(fn, arguments, constexprs: dict, aligned: bool):
    """A `triton.compiler.ASTSource` for `fn` specialised like `JITFunction`:
    pointers (16-byte aligned when `aligned`), integers divisible by 16,
    integers equal to 1 (constants), and the constexprs."""
    from triton.compiler import ASTSource

    runtime_names, constexpr_names = kernel_parameters(fn)
    missing = [name for name in constexpr_names if name not in constexprs]
    unknown = [name for name in constexprs if name not in constexpr_names]
    if missing:
        names = ", ".join(missing)
        raise ValueError(f"The config does not define constexprs: {names}.")
    if unknown:
        names = ", ".join(unknown)
        raise ValueError(f"The config defines unknown constexprs: {names}.")
    if len(arguments) != len(runtime_names):
        raise ValueError(
            f"The runtime signature has {len(arguments)} entries, but `kernel` has "
            f"{len(runtime_names)} runtime parameters."
        )
    signature, constants, attributes = {}, {}, {}
    divisible = [["tt.divisibility", 16]]
    for index, (name, value) in enumerate(zip(runtime_names, arguments)):
        if isinstance(value, (TensorMeta, Pointer)):
            signature[name] = "*" + TRITON_TYPE[value.dtype]
            if aligned:
                attributes[(index,)] = divisible
            continue
        token, constant = scalar_token(value)
        signature[name] = token
        if constant:
            constants[(index,)] = value
        elif token in ("i32", "i64", "u64") and value % 16 == 0:
            attributes[(index,)] = divisible
    offset = len(runtime_names)
    for index, name in enumerate(constexpr_names):
        signature[name] = "constexpr"
        constants[(offset + index,)] = constexprs[name]
    return ASTSource(unwrap_jit(fn), signature, constants, attributes)


def unwrap_jit(fn):
    """The `JITFunction` under decorators (unwrapping `.fn` through the decorators)."""
    from triton.runtime.jit import JITFunction

    while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
        fn = fn.fn
    return fn


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def _torch_device_guard(device):
    import torch

    return torch.cuda.device(device.index)


def compile_for_device(fn, arguments, constexprs, options, aligned, device):
    """Compiles for the GPU behind `device` (NVIDIA only); returns Triton's
    `CompiledKernel` with its module loaded on that device."""
    triton_module()  # Reports a missing Triton with the fix.
    from triton.runtime import driver

    with _torch_device_guard(device):
        target = driver.active.get_current_target()
        compiled = compile_source(
            ast_source(fn, arguments, constexprs, aligned), target, options
        )
        compiled._init_handles()
    return compiled


def compile_source(source, target, options: dict):
    """`triton.compile(source, target=target, options=options)`, with
    Triton's own compile cache (``TRITON_CACHE_DIR``, else
    ``~/.triton/cache``) treated like InfiniOps' caches (docs/behaviour.md,
    "Damaged cache entries"): Triton reads a cache hit's files unchecked, so
    a damaged entry (a metadata file that does not parse or names another
    hash, a truncated or foreign binary) would fail the compile or load a
    broken binary. Such an entry is reported once and compiled again, which
    replaces its files. Compilation errors propagate."""
    triton = triton_module()
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    try:
        compiled = triton.compile(source, target=target, options=options)
    except (CompilationError, OutOfResources):
        raise
    except Exception as error:  # noqa: BLE001 - a damaged hit fails in many ways
        damage = error
    else:
        damage = _compiled_problem(compiled)
        if damage is None:
            return compiled
    from triton import knobs

    # `always_compile` skips the cache read; the compile writes the entry anew.
    with knobs.compilation.scope():
        knobs.compilation.always_compile = True
        compiled = triton.compile(source, target=target, options=options)
    entry = Path(next(iter(compiled.metadata_group.values()))).parent
    report_damaged_entry(entry, damage)
    return compiled


def _compiled_problem(compiled) -> str | None:
    """What makes a `CompiledKernel` read from Triton's cache unusable, or `None`."""
    from triton.compiler.compiler import make_backend

    if getattr(compiled.metadata, "hash", compiled.hash) != compiled.hash:
        return "its metadata names another kernel's hash"
    binary_ext = make_backend(compiled.metadata.target).binary_ext
    return binary_problem(compiled.asm.get(binary_ext, b""), binary_ext, compiled.name)


def uses_direct_launch(device) -> bool:
    """Whether launches on `device` call the compiled kernel directly."""
    if INTERPRETER or device.platform != "nvidia":
        return False
    from triton import knobs

    # Launch hooks (profilers) need Triton's own launch path and metadata.
    hooks = knobs.runtime
    return not (hooks.launch_enter_hook.calls or hooks.launch_exit_hook.calls)


class Kernel:
    """A `@triton.jit` function of the CUDA-like kernels."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.runtime_names, self.constexpr_names = kernel_parameters(fn)

    def bind(
        self,
        *,
        grid: tuple[int, ...],
        arguments,
        constexprs: dict | None = None,
        device,
        num_warps: int = 4,
        num_stages: int = 3,
    ) -> Launch:
        return Launch(
            self,
            grid,
            tuple(arguments),
            dict(constexprs or {}),
            device,
            num_warps,
            num_stages,
        )


class Launch:
    """One planned launch: call it as ``launch(stream, *tensors)`` with the
    tensors of the pointer parameters, in order."""

    def __init__(
        self, kernel: Kernel, grid, arguments, constexprs, device, num_warps, num_stages
    ) -> None:
        if len(arguments) != len(kernel.runtime_names):
            raise TypeError(
                f"`{kernel.runtime_names}` needs {len(kernel.runtime_names)} "
                f"arguments, got {len(arguments)}"
            )
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        self.kernel = kernel
        self.grid = grid
        self.arguments = arguments
        self.constexprs = constexprs
        self.device = device
        self.options = {"num_warps": num_warps, "num_stages": num_stages}
        self.pointers = tuple(
            i
            for i, value in enumerate(arguments)
            if isinstance(value, (TensorMeta, Pointer))
        )
        self.empty = grid[0] * grid[1] * grid[2] == 0
        if self.empty:
            self._call = _nothing
        elif uses_direct_launch(device):
            self._variants = {}
            # Every argument in parameter order (constexprs included, as
            # Triton's launcher expects); pointers are filled per call.
            self._template = list(arguments) + [
                constexprs[name] for name in kernel.constexpr_names
            ]
            self._variant(True)
            # A kernel loaded for one GPU launches with that GPU current; with
            # a single GPU it always is.
            self._call = self._direct_on_device if _gpu_count() > 1 else self._direct
        else:
            self._call = self._through_triton

    def __call__(self, stream: int, *tensors) -> None:
        self._call(stream, tensors)

    # -- NVIDIA: the compiled kernel's launcher, directly ----------------------

    def _variant(self, aligned: bool):
        compiled = self._variants.get(aligned)
        if compiled is None:
            compiled = compile_for_device(
                self.kernel.fn,
                self.arguments,
                self.constexprs,
                self.options,
                aligned,
                self.device,
            )
            self._variants[aligned] = compiled
        return compiled

    def _direct(self, stream, tensors) -> None:
        args = self._template.copy()
        misaligned = 0
        for position, tensor in zip(self.pointers, tensors):
            address = tensor.data_ptr()
            args[position] = address
            misaligned |= address & 15
        compiled = self._variants.get(not misaligned) or self._variant(not misaligned)
        grid = self.grid
        compiled.run(
            grid[0],
            grid[1],
            grid[2],
            stream,
            compiled.function,
            compiled.packed_metadata,
            None,
            None,
            None,
            *args,
        )

    def _direct_on_device(self, stream, tensors) -> None:
        with _torch_device_guard(self.device):
            self._direct(stream, tensors)

    # -- interpreter and other backends: `kernel[grid](...)` --------------------

    def _through_triton(self, stream, tensors) -> None:
        args = list(self.arguments)
        for position, tensor in zip(self.pointers, tensors):
            args[position] = tensor
        with stream_context(self.device, stream):
            self.kernel.fn[self.grid](*args, **self.constexprs, **self.options)


def _nothing(stream, tensors) -> None:
    return None


# -- planning helpers every Triton launch uses -----------------------------------


def next_power_of_two(value: int) -> int:
    """The smallest power of two at least `value` (1 for `value` <= 1), the
    shape `tl.arange` needs."""
    return 1 << max(int(value) - 1, 0).bit_length()


class OverlapGuard:
    """Whether an output overlaps an input other than element for element
    (the same address, strides and dtype), which needs a staging buffer."""

    def __init__(self, out, inputs) -> None:
        self.guard = AliasGuard(
            out, tuple(out.strides), [(meta, tuple(meta.strides)) for meta in inputs]
        )

    def __call__(self, out, inputs) -> bool:
        return self.guard.needs_staging(
            out.data_ptr(), [tensor.data_ptr() for tensor in inputs]
        )


def staging_like(out):
    """An uninitialised tensor with `out`'s shape, strides, dtype and device,
    which a kernel writes before the result is copied into `out`."""
    import torch

    return torch.empty_strided(
        tuple(out.shape), out.stride(), dtype=out.dtype, device=out.device
    )
