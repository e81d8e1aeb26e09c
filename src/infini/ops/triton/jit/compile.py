"""Compiling Triton JIT kernels, with the on-disk cache of `cache.py`.

A kernel is identified (docs/behaviour.md, "Triton kernel cache") by the length-prefixed
fields ``kernel-v1``, the target's backend, architecture and warp size, the compilation
fingerprint, the operator, the runtime signature and the config (warps, stages,
constexpr count, name/value pairs). The fingerprint is the SHA-256 of the Triton
version, this file's bytes and the kernel's `cache_key` (its source and dependencies),
so upgrading Triton, this compiler or a kernel never reuses an old binary.
"""

from __future__ import annotations

import atexit
import hashlib
import inspect
import os
from functools import cache
from pathlib import Path

from infini.ops.core.config import CompileConfig
from infini.ops.runtime.triton import (
    INTERPRETER,
    ast_source,
    compile_source,
    kernel_parameters,
    python_function,
    triton_module,
)

from .cache import (
    cache_directory,
    identity,
    read_kernel_artifact,
    write_kernel_artifact,
)

_COMPILER_SOURCE = Path(__file__).read_bytes()

# (kernel identity, device index) -> Triton `CompiledKernel`; device `None`
# for kernels compiled but not loaded (the interpreter test mode).
_COMPILED: dict = {}


@cache
def jit_function(kernel):
    """A real `JITFunction` of `kernel`, also when `triton.jit` made it an
    interpreted function (the interpreter test mode still compiles)."""
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel
    return JITFunction(python_function(kernel))


@cache
def fingerprint(kernel) -> str:
    """The compilation fingerprint of `kernel` (docs/behaviour.md, "Triton kernel
    cache"). The interpreter test mode cannot compute Triton's `cache_key` (its standard
    library is interpreted there) and uses the kernel's source instead; its identities
    are its own."""
    digest = hashlib.sha256()
    digest.update(f"triton={triton_module().__version__}\n".encode())
    digest.update(b"compiler\0" + _COMPILER_SOURCE)
    if INTERPRETER:
        source = inspect.getsource(python_function(kernel))
        digest.update(b"interpreted-source\0" + source.encode())
    else:
        digest.update(b"triton-jit\0" + jit_function(kernel).cache_key.encode())
    return digest.hexdigest()


def _plain(value):
    return ("pointer", value.dtype) if hasattr(value, "dtype") else value


def runtime_signature(source) -> str:
    """One token per runtime parameter: the type, ``:16`` when divisible by
    16 (aligned pointers, integers), ``i32:1`` for the constant 1 (which
    Triton compiles in)."""
    runtime, _ = kernel_parameters(source.fn)
    tokens = []
    for index, name in enumerate(runtime):
        token = source.signature[name]
        if token == "constexpr":
            tokens.append("i32:1")
            continue
        if (index,) in source.attrs:
            token += ":16"
        tokens.append(token)
    return ",".join(tokens)


def kernel_identity(target, kernel, operator: str, signature: str, config) -> str:
    pairs = [part for item in config.constexprs for part in item]
    return identity(
        "kernel-v1",
        target.backend,
        target.arch,
        target.warp_size,
        fingerprint(kernel),
        operator,
        signature,
        config.num_warps,
        config.num_stages,
        len(config.constexprs),
        *pairs,
    )


def interpreter_target():
    """The target the interpreter test mode also compiles for, so that the
    compile and cache paths run on a CPU: `INFINI_OPS_TRITON_INTERPRET_TARGET`
    as ``backend:arch:warp_size`` (e.g. ``cuda:90:32``); `None` (run in the
    interpreter only) when unset."""
    from triton.backends.compiler import GPUTarget

    value = os.environ.get("INFINI_OPS_TRITON_INTERPRET_TARGET", "")
    if value.strip().lower() in ("", "none", "0", "off"):
        return None
    try:
        backend, arch, warp_size = value.split(":")
        return GPUTarget(backend, int(arch), int(warp_size))
    except ValueError:
        raise ValueError(
            "INFINI_OPS_TRITON_INTERPRET_TARGET must be `backend:arch:warp_size` "
            f"(e.g. `cuda:90:32`), got {value!r}."
        ) from None


def device_target(device):
    import torch
    from triton.runtime import driver

    with torch.cuda.device(device.index):
        return driver.active.get_current_target()


class KernelCompileError(RuntimeError):
    """A compilation that failed in the interpreter mode's compile worker."""


# The interpreter test mode compiles in a worker process started without
# `TRITON_INTERPRET`: in an interpreting process `triton.jit` (Triton's own
# `tl.sum`, `tl.max`, ... included) makes interpreted functions, which a real
# compilation cannot call.
_WORKER = None


def _worker():
    global _WORKER
    if _WORKER is None:
        import multiprocessing

        hidden = {
            name: os.environ.pop(name)
            for name in ("INFINI_OPS_TRITON_INTERPRET", "TRITON_INTERPRET")
            if name in os.environ
        }
        try:
            _WORKER = multiprocessing.get_context("spawn").Pool(1)
        finally:
            os.environ.update(hidden)
        atexit.register(_stop_worker)
    return _WORKER


def _stop_worker() -> None:
    global _WORKER
    if _WORKER is not None:
        _WORKER.terminate()
        _WORKER.join()
        _WORKER = None


def _compile_job(
    module_name, kernel_name, arguments, config, operator, target, aligned, directory
):
    """Runs in the compile worker: compiles (or finds) and caches a kernel."""
    import importlib

    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    kernel = getattr(importlib.import_module(module_name), kernel_name)
    os.environ["INFINI_OPS_TRITON_CACHE_DIR"] = str(directory)
    # The disk is the truth: the worker keeps no kernels between jobs.
    clear_memory_cache()
    try:
        compile_kernel(kernel, arguments, config, operator, target, aligned)
    except ValueError as error:
        return ("ValueError", str(error))
    except (CompilationError, OutOfResources) as error:
        return ("KernelCompileError", str(error))
    return None


def _compile_in_worker(kernel, arguments, config, operator, target, aligned):
    from infini.ops.core.tensor import TensorMeta
    from infini.ops.runtime.triton import Pointer

    function = python_function(kernel)
    arguments = tuple(
        Pointer(value.dtype) if isinstance(value, (TensorMeta, Pointer)) else value
        for value in arguments
    )
    job = (
        function.__module__,
        function.__name__,
        arguments,
        config,
        operator,
        target,
        aligned,
        str(cache_directory()),
    )
    failure = _worker().apply_async(_compile_job, job).get(timeout=900)
    if failure is not None:
        kind, message = failure
        raise (ValueError if kind == "ValueError" else KernelCompileError)(message)


def compile_kernel(
    kernel,
    arguments,
    config: CompileConfig,
    operator: str,
    target,
    aligned: bool,
    device=None,
):
    """The compiled kernel for these arguments and config: from memory, from
    the disk cache, or compiled (and written to the cache). Loaded onto
    `device` unless it is `None`."""
    from triton.compiler import CompiledKernel
    from triton.compiler.compiler import make_backend

    if INTERPRETER:
        key = ("interpreter", python_function(kernel), tuple(map(_plain, arguments)))
        key += (config, operator, target, aligned, cache_directory())
        if key not in _COMPILED:
            _compile_in_worker(kernel, arguments, config, operator, target, aligned)
            _COMPILED[key] = None
        return None
    source = ast_source(
        jit_function(kernel), arguments, dict(config.constexprs), aligned
    )
    identity_text = kernel_identity(
        target, kernel, operator, runtime_signature(source), config
    )
    key = (identity_text, None if device is None else device.index)
    compiled = _COMPILED.get(key)
    if compiled is not None:
        return compiled
    artifact = read_kernel_artifact(identity_text)
    if artifact is not None:
        record, json_path, binary_path = artifact
        group = {
            f"{record['name']}.json": str(json_path),
            f"{record['name']}.{record['binary_ext']}": str(binary_path),
        }
        compiled = CompiledKernel(source, group, identity_text)
    else:
        compiled = compile_source(
            source,
            target,
            {"num_warps": config.num_warps, "num_stages": config.num_stages},
        )
        metadata = compiled.metadata
        if metadata.global_scratch_size or metadata.profile_scratch_size:
            raise ValueError(
                f"The Triton JIT kernel of `{operator}` needs scratch memory with "
                f"this config ({config.to_json()}), which InfiniOps does not "
                "provide; choose another config."
            )
        binary_ext = make_backend(target).binary_ext
        write_kernel_artifact(
            identity_text,
            metadata._asdict(),
            binary_ext,
            compiled.asm[binary_ext],
        )
    if device is not None:
        import torch

        with torch.cuda.device(device.index):
            compiled._init_handles()
    _COMPILED[key] = compiled
    return compiled


def clear_memory_cache() -> None:
    """Forgets compiled kernels held in memory (the disk cache stays)."""
    _COMPILED.clear()
