"""What every Triton JIT implementation (slot 10) shares.

An implementation subclasses its operator's base and `TritonJitOperator`,
validates what its kernel needs, and calls `setup_jit` from `__init__` with
the kernel's runtime arguments (`TensorMeta` for pointers), its tuning
values and its grid (a function of the constexprs). `setup_jit` resolves the
`config=` of the call (or the default config), compiles (through the disk
cache) and binds the launch; an auto-tuning config is resolved at the first
launch, when the tensors to benchmark on are there.

Launches go through the shared Triton launch runtime
(`infini.ops.runtime.triton`), as the native CUDA-like kernels' do: the
compiled kernel called directly on the caller's stream on NVIDIA GPUs,
Triton's interpreter on CPU tensors in the interpreter test mode (which also
compiles and caches for `interpreter_target()` when
`INFINI_OPS_TRITON_INTERPRET_TARGET` names one, so the compile and cache
paths run on a CPU).
"""

from __future__ import annotations

import statistics
import time

from infini.ops.core.config import (
    AutoTuningConfig,
    CompileConfig,
    check_keys,
    parse_config,
)
from infini.ops.core.geometry import coalesce
from infini.ops.core.streams import stream_context
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Launch,
    kernel_parameters,
    require_device,
)

from .cache import (
    identity,
    read_auto_tuning_config,
    write_auto_tuning_config,
)
from .compile import (
    KernelCompileError,
    compile_kernel,
    device_target,
    fingerprint,
    interpreter_target,
    jit_function,
    runtime_signature,
)

# Auto-tuning identity -> winning config, for this process.
_TUNED: dict[str, CompileConfig] = {}


class JitLaunch(Launch):
    """A `Launch` whose compiled kernels come from the Triton JIT cache."""

    def __init__(self, operator, config: CompileConfig, target, **launch) -> None:
        self.jit_operator = operator
        self.jit_config = config
        self.target = target
        super().__init__(**launch)

    def _variant(self, aligned: bool):
        compiled = self._variants.get(aligned)
        if compiled is None:
            compiled = compile_kernel(
                self.kernel.fn,
                self.arguments,
                self.jit_config,
                self.jit_operator,
                self.target,
                aligned,
                self.device,
            )
            self._variants[aligned] = compiled
        return compiled


class TritonJitOperator:
    """Mixin of Triton JIT implementations; see the module docstring."""

    #: The `@triton.jit` kernel and its default constexprs.
    kernel = None
    default_constexprs: dict = {}
    #: Positions (in pointer order) of the tensors the kernel writes: an
    #: auto-tuning benchmark writes scratch tensors in their place.
    written: tuple[int, ...] = ()

    def setup_jit(self, config, arguments, tuning_values: dict, grid) -> None:
        require_device(self.name, self.device)
        self._jit_kernel = Kernel(self.kernel)
        self._jit_arguments = tuple(arguments)
        self._jit_tuning_values = dict(tuning_values)
        self._jit_grid = grid
        self._jit_target = (
            interpreter_target() if INTERPRETER else device_target(self.device)
        )
        parsed = CompileConfig() if config is None else parse_config(config)
        if isinstance(parsed, AutoTuningConfig):
            self._jit_keys = check_keys(parsed.keys, tuning_values, self.name)
            self._jit_tuning = parsed
            self._jit_launch = self._tune_then_launch
        else:
            self._jit_launch = self._bind(parsed.with_defaults(self.default_constexprs))

    # -- binding ---------------------------------------------------------------

    def _check_constexprs(self, config: CompileConfig) -> None:
        _, names = kernel_parameters(self.kernel)
        given = dict(config.constexprs)
        missing = [name for name in names if name not in given]
        unknown = [name for name in given if name not in names]
        if missing:
            raise ValueError(
                f"The config does not define constexprs: {', '.join(missing)}."
            )
        if unknown:
            raise ValueError(
                f"The config defines unknown constexprs: {', '.join(unknown)}."
            )

    def _bind(self, config: CompileConfig):
        self._check_constexprs(config)
        constexprs = dict(config.constexprs)
        grid = self._jit_grid(constexprs)
        launch = {
            "kernel": self._jit_kernel,
            "grid": grid,
            "arguments": self._jit_arguments,
            "constexprs": constexprs,
            "device": self.device,
            "num_warps": config.num_warps,
            "num_stages": config.num_stages,
        }
        if INTERPRETER:
            if self._jit_target is not None:
                # Compiled and cached, not loaded: the interpreter runs it.
                compile_kernel(
                    self.kernel,
                    self._jit_arguments,
                    config,
                    self.name,
                    self._jit_target,
                    True,
                )
            return Launch(**launch)
        return JitLaunch(self.name, config, self._jit_target, **launch)

    # -- auto-tuning -----------------------------------------------------------

    def _tuning_identity(self, grids) -> str:
        tuning = self._jit_tuning
        target = self._jit_target
        backend = "interpreter" if INTERPRETER else target.backend
        from infini.ops.runtime.triton import ast_source

        defaults = tuning.candidates[0].with_defaults(self.default_constexprs)
        source = ast_source(
            jit_function(self.kernel),
            self._jit_arguments,
            dict(defaults.constexprs),
            True,
        )
        fields = [
            "auto-tuning-v3",
            backend,
            getattr(target, "arch", ""),
            getattr(target, "warp_size", ""),
            fingerprint(self.kernel),
            self.name,
            runtime_signature(source),
            tuning.warmup_milliseconds,
            tuning.repetition_milliseconds,
            len(self._jit_keys),
        ]
        for key in self._jit_keys:
            fields += [key, self._jit_tuning_values[key]]
        fields.append(len(tuning.candidates))
        for candidate, grid in zip(tuning.candidates, grids):
            full = candidate.with_defaults(self.default_constexprs)
            fields += [full.num_warps, full.num_stages, len(full.constexprs)]
            fields += [part for item in full.constexprs for part in item]
            fields.append("x".join(str(g) for g in grid))
        return identity(*fields)

    def _tune_then_launch(self, stream, *tensors) -> None:
        config = self._tuned_config(stream, tensors)
        self._jit_launch = self._bind(config)
        self._jit_launch(stream, *tensors)

    def _tuned_config(self, stream, tensors) -> CompileConfig:
        candidates = [
            candidate.with_defaults(self.default_constexprs)
            for candidate in self._jit_tuning.candidates
        ]
        for candidate in candidates:
            self._check_constexprs(candidate)
        grids = [self._jit_grid(dict(c.constexprs)) for c in candidates]
        identity_text = self._tuning_identity(grids)
        config = _TUNED.get(identity_text) or read_auto_tuning_config(identity_text)
        if config is None:
            config = candidates[auto_tune(self, candidates, stream, tensors)]
            write_auto_tuning_config(identity_text, config)
        _TUNED[identity_text] = config
        return config

    def launch_jit(self, stream, *tensors) -> None:
        self._jit_launch(stream, *tensors)


def auto_tune(operator: TritonJitOperator, candidates, stream, tensors) -> int:
    """The index of the fastest candidate; each is compiled (its artifacts
    cached) and benchmarked on the caller's stream, writing scratch copies
    of the written tensors. Candidates that fail to compile or do not fit the
    device are skipped."""
    import torch
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    tuning = operator._jit_tuning
    with stream_context(operator.device, stream):
        scratch = list(tensors)
        for position in operator.written:
            scratch[position] = torch.empty_like(tensors[position])
    best, best_time = None, None
    for index, candidate in enumerate(candidates):
        try:
            launch = operator._bind(candidate)

            def run(launch=launch):
                launch(stream, *scratch)

            elapsed = benchmark(
                run,
                operator.device,
                stream,
                tuning.warmup_milliseconds,
                tuning.repetition_milliseconds,
            )
        except (CompilationError, OutOfResources, KernelCompileError):
            continue
        if best_time is None or elapsed < best_time:
            best, best_time = index, elapsed
    if best is None:
        raise RuntimeError("No auto-tuning candidate completed successfully.")
    return best


def benchmark(run, device, stream, warmup_milliseconds, repetition_milliseconds):
    """Median milliseconds of `run`: `triton.testing.do_bench` on the
    caller's stream on GPUs; wall-clock time under the interpreter."""
    if INTERPRETER:
        deadline = time.perf_counter() + warmup_milliseconds / 1000
        while time.perf_counter() < deadline:
            run()
        times = []
        deadline = time.perf_counter() + repetition_milliseconds / 1000
        while not times or time.perf_counter() < deadline:
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)
    from triton.testing import do_bench

    with stream_context(device, stream):
        return do_bench(
            run,
            warmup=warmup_milliseconds,
            rep=repetition_milliseconds,
            return_mode="median",
        )


def leading_rows(operator, shape, *operand_strides):
    """`(rows, inner_rows, *(outer, inner) strides per operand)`: the leading
    dimensions of row kernels coalesced into at most two, which the Triton
    JIT kernels index as ``row // inner_rows`` and ``row % inner_rows``."""
    rows = 1
    for size in shape:
        rows *= size
    dims, strides = coalesce(tuple(shape), [tuple(s) for s in operand_strides])
    if rows == 0:
        return (0, 1, *[(0, 0) for _ in operand_strides])
    if len(dims) > 2:
        described = " and ".join(str(tuple(s)) for s in operand_strides)
        raise operator.error(
            "the Triton JIT implementation (slot 10) needs the leading dimensions "
            "of its tensors to collapse into at most two; their leading strides "
            f"are {described}."
        )
    if not dims:
        return (rows, 1, *[(0, 0) for _ in operand_strides])
    if len(dims) == 1:
        return (rows, dims[0], *[(0, s[0]) for s in strides])
    return (rows, dims[1], *[(s[0], s[1]) for s in strides])
