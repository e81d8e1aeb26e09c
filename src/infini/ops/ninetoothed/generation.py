"""Turning an arrangement and an application into a Triton kernel we launch.

NineToothed describes a kernel as an *arrangement* (how each tensor is tiled
into the blocks one program handles) plus an *application* (what one
program computes on its blocks). `ninetoothed.make` turns the pair into a
Triton kernel and a Python launcher; that launcher reads sizes and strides
from torch tensors on every call, which costs tens of microseconds. We keep
only the generated `@triton.jit` kernel and launch it through
`infini.ops.runtime.triton`, the bound-launch path of the native Triton
kernels: its runtime arguments are computed once per geometry
(`KernelSource.arguments`) and a call only fills in the data pointers.

What we change in the generated source, and why:

- Block sizes are plain integers in our arrangements, never `block_size()`
  meta-symbols, so no auto-tuning code is generated and NineToothed never
  asks a driver for device properties (which fails on a machine without a
  GPU and under Triton's interpreter). `_offline_code_generator` fills in
  the limits the auto-tuner would have read, and generates neither the
  auto-tuner nor NineToothed's torch launcher, which we drop.
- The kernel's parameters are reordered: each tensor's pointer, sizes and
  strides in the order the arrangement lists the tensors, then the
  `tl.constexpr` parameters, which the launch runtime expects last.
- The source is written to our cache directory (`cache.py`), not to
  NineToothed's, so that Triton can read it back (`triton.jit` needs a file)
  and a later process reuses it without running the code generator.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import json
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from infini.ops.runtime.cache import write_atomically
from infini.ops.runtime.triton import next_power_of_two, python_function

from . import language
from .cache import generated_source_path, generated_text, read_generated_header

# Every module of the package outside `ops/` (this generator, the helpers,
# the shared arrangements) is part of each fingerprint.
_GENERATOR_SOURCE = b"\0".join(
    path.read_bytes() for path in sorted(Path(__file__).parent.glob("*.py"))
)
_LANGUAGE_SOURCE = Path(__file__).with_name("language.py").read_bytes()
_LOCK = threading.Lock()
_LOADED: dict[str, KernelSource] = {}
_FINGERPRINTS: dict = {}

# The helper of `language.py` every store of a kernel goes through.
_STORE_HELPER = python_function(language.store_rounded).__name__

_PREFIX = re.compile(r"^ninetoothed_(constexpr|next_power_of_2)_prefix_")
_TENSOR_FIELD = re.compile(r"^ninetoothed_(\w+?)_(pointer|size|stride)(?:_(\d+))?$")

# What NineToothed's auto-tuner would have derived from the device; our
# arrangements have no meta-parameters, so it only has to be a valid bound.
_MAX_ELEMENTS_PER_PROGRAM = 2**20


def ninetoothed_module():
    """The `ninetoothed` module, or a clear error when it is not installed."""
    try:
        import ninetoothed as module
    except ImportError as error:
        raise ImportError(
            "The NineToothed kernels of InfiniOps (slot 9) need the `ninetoothed` "
            f"package, which cannot be imported ({error}); install it "
            "(`pip install ninetoothed==0.26.0`)."
        ) from error
    return module


@dataclass(frozen=True)
class TensorSpec:
    """One parameter of an arrangement: a tensor of `ndim` dimensions, or a
    runtime scalar (`ndim == 0`)."""

    name: str
    ndim: int
    other: float | None = None
    constexpr: bool = False


class KernelSource:
    """A generated kernel: its `@triton.jit` function, the order of its
    runtime parameters and how to compute them and the grid from operand
    geometries."""

    def __init__(self, function, parameters, grid: str, constexprs: dict) -> None:
        self.function = function
        self.parameters = parameters
        self._grid = compile(grid, "<ninetoothed grid>", "eval")
        self.constexprs = constexprs

    def arguments(self, operands: dict) -> tuple[tuple, tuple[int, ...], dict]:
        """`(runtime arguments, grid, constexprs)` for `operands`, a map from
        each spec name to ``(pointer marker, shape, strides)`` for a tensor
        or to the value of a scalar. The pointer markers are placed where the
        pointers go; the launch replaces them with data pointers per call."""
        values = {}
        for name, operand in operands.items():
            if isinstance(operand, tuple):
                marker, shape, strides = operand
                values[f"ninetoothed_{name}_pointer"] = marker
                for dim, (size, stride) in enumerate(zip(shape, strides)):
                    values[f"ninetoothed_{name}_size_{dim}"] = int(size)
                    values[f"ninetoothed_{name}_stride_{dim}"] = int(stride)
            else:
                values[name] = operand
        runtime = tuple(values[name] for name in self.parameters)
        grid = eval(self._grid, {}, values)  # noqa: S307 - our generated expression
        constexprs = {}
        for name, (kind, inner) in self.constexprs.items():
            value = values[inner]
            constexprs[name] = next_power_of_two(value) if kind == "power" else value
        return runtime, (max(int(grid), 0),), constexprs


def _offline_code_generator():
    from ninetoothed.generation import CodeGenerator

    class OfflineCodeGenerator(CodeGenerator):
        def __init__(self) -> None:
            ast.NodeTransformer.__init__(self)
            # The two limits the auto-tuner reads (see the module docstring).
            vars(self).update(
                _min_num_elements=1, _max_num_elements=_MAX_ELEMENTS_PER_PROGRAM
            )

        def _generate_autotune(self, params, meta):
            # Nothing to tune without meta-parameters (our blocks are
            # integers; the bounds it would check need declared upper
            # bounds for symbolic tile sizes, which ours do not have).
            if meta:
                raise ValueError("NineToothed arrangements here take integer blocks")
            return None

        def _generate_launch(self, params, meta):
            # NineToothed's torch launcher is dropped (`_adapt_source`), so
            # it is not generated.
            self._generate_grid()  # sets `raw_grid`, which `_generate` reads
            return ast.Pass()

    return OfflineCodeGenerator()


def _fingerprint(name, arrangement, application, specs, config) -> str:
    """The identity of a generated source: the NineToothed and Triton
    versions, this generator, the shared kernel helpers, the operator's
    module (its arrangement and application), the specs and the config. Any
    change makes a new entry, so a stale source is never reused."""
    key = (
        name,
        arrangement.__module__,
        application.__module__,
        specs,
        tuple(sorted(config.items())),
    )
    known = _FINGERPRINTS.get(key)
    if known is not None:
        return known
    from importlib.metadata import version

    import triton

    digest = hashlib.sha256()
    for part in (
        f"ninetoothed={version('ninetoothed')}",
        f"triton={triton.__version__}",
        name,
        repr(specs),
        json.dumps(config, sort_keys=True),
    ):
        digest.update(part.encode("utf-8") + b"\0")
    digest.update(_GENERATOR_SOURCE + b"\0" + _LANGUAGE_SOURCE + b"\0")
    for module in sorted({arrangement.__module__, application.__module__}):
        digest.update(inspect.getsource(sys.modules[module]).encode() + b"\0")
    _FINGERPRINTS[key] = known = digest.hexdigest()
    return known


class _RoundingStores(ast.NodeTransformer):
    """Turns ``triton.language.store(pointer, value, mask=mask)`` into
    ``store_rounded(pointer, value, mask)``, which rounds `value` to the
    pointer's element type as our other kernels do (bfloat16 to nearest
    even: Triton's interpreter would truncate)."""

    def visit_Call(self, node):
        self.generic_visit(node)
        function = node.func
        if (
            isinstance(function, ast.Attribute)
            and function.attr == "store"
            and ast.unparse(function.value) in ("triton.language", "tl")
        ):
            mask = next((k.value for k in node.keywords if k.arg == "mask"), None)
            arguments = list(node.args[:2]) + [mask or ast.Constant(value=None)]
            return ast.Call(
                func=ast.Name(id=_STORE_HELPER, ctx=ast.Load()),
                args=arguments,
                keywords=[],
            )
        return node


def _adapt_source(source: str, kernel_name: str, specs) -> tuple[str, list]:
    """The generated source adapted to our launch path: the kernel's runtime
    parameters in spec order and its constexprs last, stores rounded, the
    helpers of `language.py` defined, NineToothed's torch launcher dropped.
    Returns the source and the runtime parameter names."""
    tree = ast.parse(source)
    function = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == kernel_name
    )
    by_name = {argument.arg: argument for argument in function.args.args}
    runtime = [name for name in by_name if by_name[name].annotation is None]
    constexpr = [name for name in by_name if by_name[name].annotation is not None]

    def rank(name):
        match = _TENSOR_FIELD.match(name)
        owner = match.group(1) if match else name
        field = match.group(2) if match else "scalar"
        dim = int(match.group(3) or 0) if match else 0
        position = next(i for i, spec in enumerate(specs) if spec.name == owner)
        return position, ("pointer", "size", "stride", "scalar").index(field), dim

    runtime.sort(key=rank)
    function.args.args = [by_name[name] for name in runtime + constexpr]
    _RoundingStores().visit(function)
    # NineToothed appends its torch launcher and copies of the `@triton.jit`
    # functions it finds beside the application (compiled ones only, so not
    # under the interpreter); we keep the kernel and add our helpers, the
    # same in both modes.
    imports = [
        node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    helpers = ["@triton.jit\n" + helper for helper in _language_helpers().values()]
    tree.body = imports + ast.parse("import triton.language as tl").body + [function]
    source = "\n\n".join([ast.unparse(tree), *helpers]) + "\n"
    return source, runtime


def _language_helpers() -> dict:
    """The source of each `@triton.jit` helper of `language.py`, decorator
    included. Read from the file, so that it is the same whether `triton.jit`
    made the helpers compiled or interpreted functions (NineToothed itself
    copies only compiled ones)."""
    tree = ast.parse(_LANGUAGE_SOURCE.decode("utf-8"))
    return {
        node.name: ast.get_source_segment(_LANGUAGE_SOURCE.decode("utf-8"), node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and hasattr(language, node.name)
    }


def _constexpr_sources(parameters) -> dict:
    """Each `tl.constexpr` parameter and where its value comes from:
    ``("power", name)``, the next power of two of a runtime value, or
    ``("value", name)``, a constexpr spec's value."""
    result = {}
    for name in parameters:
        match = _PREFIX.match(name)
        if match is None:
            raise ValueError(f"unexpected constexpr parameter `{name}` in a kernel")
        kind = "power" if match.group(1) == "next_power_of_2" else "value"
        result[name] = [kind, name[match.end() :]]
    return result


def _generate(name, arrangement, application, specs, config, num_warps, num_stages):
    """Runs NineToothed's code generator; returns the source text, the
    runtime parameter names, the grid expression and the constexprs."""
    ninetoothed = ninetoothed_module()
    import ninetoothed.generation as generation

    tensors = tuple(
        ninetoothed.Tensor(spec.ndim, name=spec.name, other=spec.other)
        if not spec.constexpr
        else ninetoothed.Tensor(0, constexpr=True, name=spec.name)
        for spec in specs
    )
    arranged = arrangement(*tensors, **config)
    arranged = arranged if isinstance(arranged, tuple) else (arranged,)
    parameters = inspect.signature(application).parameters
    # NineToothed reads the arranged tensors from the annotations.
    annotations = application.__annotations__
    annotations.clear()
    annotations.update(zip(parameters, arranged))
    captured = {}

    def capture(source):
        captured["source"] = source
        return Path("<ninetoothed>")

    generator = _offline_code_generator()
    kernel_name = f"infini_ops_ninetoothed_{name}"
    # NineToothed writes every source it generates to its own cache; we keep
    # ours in our cache directory instead (see the module docstring).
    original = generation.cache_source
    generation.cache_source = capture
    try:
        generator(application, "torch", kernel_name, num_warps, num_stages, None, False)
    finally:
        generation.cache_source = original
    source, runtime = _adapt_source(captured["source"], kernel_name, specs)
    grid = ast.unparse(generator.raw_grid.body.elts[0])
    function = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == kernel_name
    )
    constexpr = [a.arg for a in function.args.args if a.annotation is not None]
    return source, kernel_name, runtime, grid, _constexpr_sources(constexpr)


def kernel_source(
    name: str,
    arrangement,
    application,
    specs: tuple[TensorSpec, ...],
    config: dict | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
) -> KernelSource:
    """The kernel of `arrangement` and `application` for `specs` and the
    integer `config` the arrangement takes (block sizes), generated once per
    process and cached on disk across processes."""
    config = dict(config or {})
    fingerprint = _fingerprint(name, arrangement, application, specs, config)
    loaded = _LOADED.get(fingerprint)
    if loaded is not None:
        return loaded
    with _LOCK:
        loaded = _LOADED.get(fingerprint)
        if loaded is None:
            loaded = _load_or_generate(
                fingerprint,
                name,
                arrangement,
                application,
                specs,
                config,
                num_warps,
                num_stages,
            )
            _LOADED[fingerprint] = loaded
    return loaded


def _load_or_generate(
    fingerprint, name, arrangement, application, specs, config, num_warps, num_stages
) -> KernelSource:
    path = generated_source_path(name, fingerprint)
    header = read_generated_header(path, fingerprint)
    if header is None:
        source, kernel_name, runtime, grid, constexprs = _generate(
            name, arrangement, application, specs, config, num_warps, num_stages
        )
        header = {
            "fingerprint": fingerprint,
            "kernel": kernel_name,
            "parameters": runtime,
            "grid": grid,
            "constexprs": constexprs,
        }
        write_atomically(path, generated_text(header, source).encode("utf-8"))
    module = _import(path, f"infini_ops_ninetoothed_generated_{fingerprint[:16]}")
    return KernelSource(
        getattr(module, header["kernel"]),
        tuple(header["parameters"]),
        header["grid"],
        dict(header["constexprs"]),
    )


def write_source(
    path: Path,
    name: str,
    arrangement,
    application,
    specs,
    config: dict,
    num_warps: int = 4,
    num_stages: int = 3,
) -> dict:
    """Generates the kernel source into `path` (the ahead-of-time step) and
    returns its header."""
    source, kernel_name, runtime, grid, constexprs = _generate(
        name, arrangement, application, specs, config, num_warps, num_stages
    )
    header = {
        "fingerprint": _fingerprint(name, arrangement, application, specs, config),
        "kernel": kernel_name,
        "parameters": runtime,
        "grid": grid,
        "constexprs": constexprs,
    }
    write_atomically(path, generated_text(header, source).encode("utf-8"))
    return header


def load_source(path: Path, module_name: str):
    """Imports a generated source file (a module Triton can read back)."""
    return _import(path, module_name)


def _import(path: Path, module_name: str):
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
