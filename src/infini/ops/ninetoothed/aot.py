"""Ahead-of-time NineToothed kernels: sources and sm_90 cubins, built offline.

`WITH_NINETOOTHED=ON` with `GENERATE_OPERATOR_CALL_INSTANTIATIONS=ON` runs
`scripts/generate_ninetoothed.py`, which calls `generate` for the default
instantiations of every slot-9 kernel (`VARIANTS`):

- `rms_norm`: the variants the original builds, ranks 2-4 x
  float32/float16/bfloat16 x blocks of 256 and 512 columns (18);
- the elementwise kernels (`add`, `mul`, `silu`, `swiglu`, `gelu` and its
  tanh form: one coalesced dimension; `silu_and_mul`: rows of halves, two
  dimensions) with the GPU block of 1024 elements, and `softmax` (2-D) and
  `causal_softmax` (3-D) with rows of 1024-column blocks;
- `rotary_embedding` for 128-wide heads, 32 query and 8 key heads;
- `gemm` with the GPU tiles of each dtype;
- `scaled_dot_product_attention` for 128 features, one merged batch
  dimension, causal or not;

each in float32, float16 and bfloat16 (the attention in the 16-bit types).
Each variant gets

- ``<variant>.py``: the generated Triton source (the same text the JIT path
  writes to the cache, fingerprint header included);
- ``<variant>.cubin`` and ``<variant>.json``: the kernel compiled by
  Triton's NVIDIA backend with its bundled `ptxas` for the target (sm_90 by
  default), and Triton's metadata;

and ``manifest.json`` lists them. No GPU and no driver are needed up to
here. Loading a cubin into a CUDA context needs `libcuda`; on a machine
without it the generator stops after compiling and says so
(`LINK_UNAVAILABLE`). The run-time path does not read these files: it
compiles on the first call per geometry, through Triton's cache.

A variant is compiled for the arguments of an example call (`Plan`): its
runtime integers are specialised as Triton specialises them (a value of 1 is
a constant, multiples of 16 are marked divisible) and pointers are 16-byte
aligned, so the examples are contiguous operands with 16-multiple sizes
(the usual model shapes); other geometries compile their own variant at run
time.
"""

from __future__ import annotations

import ctypes.util
import json
from dataclasses import dataclass
from pathlib import Path

from infini.ops.runtime.cache import write_atomically
from infini.ops.runtime.triton import TRITON_TYPE, ast_source, compile_source

from .generation import KernelSource, load_source, write_source

DTYPES = ("float32", "float16", "bfloat16")
LINK_UNAVAILABLE = (
    "NineToothed ahead-of-time kernels: sources and cubins were generated, but "
    "loading them (the link step of the original's build) needs `libcuda`, "
    "which this machine does not have. (The run-time path does not load them "
    "yet: a GPU machine compiles each geometry on its first call.)"
)


@dataclass(frozen=True)
class Variant:
    """One instantiation: an operator's kernel for `dtype` and the kernel's
    `case` (rank, blocks, ...: what `_PLANS[operator]` reads)."""

    operator: str
    dtype: str
    case: tuple = ()
    label: str = ""

    @property
    def name(self) -> str:
        if self.operator == "elementwise":
            return f"{self.label}_{self.dtype}"
        if self.operator == "rms_norm":
            ndim, block = self.case
            return f"rms_norm_ndim{ndim}_{self.dtype}_block{block}"
        return "_".join(
            part for part in (self.operator, self.label, self.dtype) if part
        )


@dataclass
class Plan:
    """What a variant compiles: the kernel (`name`, `arrangement`,
    `application`, `specs`, `config`, as `generation.kernel_source` takes
    them), an example call's operands (pointer markers for tensors) and the
    launch options."""

    name: str
    module: object
    specs: tuple
    config: dict
    operands: dict
    num_warps: int = 4
    num_stages: int = 3
    application: object = None

    @property
    def arrangement(self):
        return self.module.arrangement

    def application_function(self):
        return self.application or self.module.application


def _contiguous(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= size
    return tuple(strides)


def _tensor(dtype, shape, strides=None):
    from infini.ops.runtime.triton import Pointer

    shape = tuple(shape)
    return (Pointer(dtype), shape, tuple(strides or _contiguous(shape)))


# -- the plans of each operator ---------------------------------------------------


def _rms_norm(variant: Variant) -> Plan:
    import triton.language as tl

    from .ops import rms_norm

    ndim, block = variant.case
    shape = (17,) * (ndim - 1) + (4096,)
    strides = (4096 * 16,) * (ndim - 2) + (4096, 1)
    weight = (0,) * (ndim - 1) + (1,)
    dtype = variant.dtype
    return Plan(
        "rms_norm",
        rms_norm,
        rms_norm.specs(ndim),
        {"block": block},
        {
            "input": _tensor(dtype, shape, strides),
            "weight": _tensor(dtype, shape, weight),
            "eps": 1e-6,
            "hidden": 4096,
            "out": _tensor(dtype, shape, strides),
            "compute": tl.float32,
        },
    )


# The elementwise kernels: (generated name, module, application attribute,
# inputs, scalars).
_ELEMENTWISE = {
    "add": ("add", "add", "application", ("input", "other"), {"alpha": 1.5}),
    "mul": ("mul", "mul", "application", ("input", "other"), {}),
    "silu": ("silu", "silu", "application", ("input",), {}),
    "swiglu": ("swiglu", "swiglu", "application", ("input", "gate"), {}),
    "gelu": ("gelu", "gelu", "exact_application", ("input",), {}),
    "gelu_tanh": ("gelu_tanh", "gelu", "tanh_application", ("input",), {}),
    "silu_and_mul": ("silu_and_mul", "silu_and_mul", "application", ("gate", "up"), {}),
}


def _elementwise(variant: Variant) -> Plan:
    import importlib

    from .elementwise import GPU_BLOCK, elementwise_arrangement
    from .generation import TensorSpec

    name, module_name, attribute, inputs, scalars = _ELEMENTWISE[variant.label]
    module = importlib.import_module(f"{__package__}.ops.{module_name}")
    dtype = variant.dtype
    if variant.label == "silu_and_mul":
        # Rows of `input` (tokens, 2 x 4096) halves into `out` (tokens, 4096).
        shape, input_strides, out_strides = (16, 4096), (8192, 1), (4096, 1)
    else:
        shape = (1 << 20,)
        input_strides = out_strides = (1,)
    ndim = len(shape)
    order = (*inputs, *scalars, "out")
    specs = tuple(
        TensorSpec(key, 0) if key in scalars else TensorSpec(key, ndim) for key in order
    )
    operands = {key: _tensor(dtype, shape, input_strides) for key in inputs}
    operands.update(scalars)
    operands["out"] = _tensor(dtype, shape, out_strides)

    class _Elementwise:  # the arrangement every elementwise kernel shares
        arrangement = staticmethod(elementwise_arrangement)

    return Plan(
        name,
        _Elementwise,
        specs,
        {"block": GPU_BLOCK},
        operands,
        application=getattr(module, attribute),
    )


def _softmax(variant: Variant) -> Plan:
    from .ops import softmax

    shape = (64, 4096)
    dtype = variant.dtype
    return Plan(
        "softmax",
        softmax,
        softmax.specs(2),
        {"block": 1024},
        {"input": _tensor(dtype, shape), "out": _tensor(dtype, shape)},
        num_warps=4,
    )


def _causal_softmax(variant: Variant) -> Plan:
    from .ops import causal_softmax

    shape = (32, 512, 512)
    dtype = variant.dtype
    return Plan(
        "causal_softmax",
        causal_softmax,
        causal_softmax.specs(3),
        {"block": 1024},
        {
            "input": _tensor(dtype, shape),
            "row": _tensor("int64", shape, (0, 1, 0)),
            "column": _tensor("int64", shape, (0, 0, 1)),
            "shift": 0,
            "out": _tensor(dtype, shape),
        },
    )


def _rotary_embedding(variant: Variant) -> Plan:
    from .ops import rotary_embedding as rope

    tokens, query_heads, key_heads, head_size = 256, 32, 8, 128
    half = head_size // 2
    block, query_block, key_block, half_block = rope.blocks(
        tokens, query_heads, key_heads, half
    )
    dtype = variant.dtype

    def pairs(heads, start):
        # NeoX: (start, tokens outer, tokens inner, heads, pairs).
        shape = (2, 1, tokens, heads, half)
        return _tensor(dtype, shape, (start, 0, heads * head_size, head_size, 1))

    return Plan(
        "rotary_embedding",
        rope,
        rope.specs(),
        {
            "block": block,
            "block_query_heads": query_block,
            "block_key_heads": key_block,
            "block_half": half_block,
        },
        {
            "positions": _tensor("int64", (1, tokens), (0, 1)),
            "query_x": pairs(query_heads, 0),
            "query_y": pairs(query_heads, half),
            "key_x": pairs(key_heads, 0),
            "key_y": pairs(key_heads, half),
            "cache": _tensor(dtype, (4096, head_size)),
            "half": half,
            "sign": 1.0,
        },
        num_warps=4 if block * max(query_block, key_block) * half_block <= 2048 else 8,
    )


def _gemm(variant: Variant) -> Plan:
    from .ops import gemm

    block_m, block_n, block_k, warps = gemm.GPU_TILES[variant.dtype]
    m = n = k = 4096
    dtype = variant.dtype
    return Plan(
        "gemm",
        gemm,
        gemm.specs(),
        {"block_m": block_m, "block_n": block_n, "block_k": block_k},
        {
            "a": _tensor(dtype, (1, m, k), (0, k, 1)),
            # The usual weight: (n, k) row-major, transposed.
            "b": _tensor(dtype, (1, k, n), (0, 1, k)),
            "alpha": 1.5,
            "y": _tensor(dtype, (1, m, n), (0, n, 1)),
            "accumulate": gemm.constexprs(dtype)["accumulate"],
            "wide": False,
        },
        num_warps=warps,
    )


def _attention(variant: Variant) -> Plan:
    from .ops import scaled_dot_product_attention as attention

    (causal,) = variant.case
    batch, length, features = 64, 1024, 128
    block_m, block_n = attention.GPU_BLOCKS
    dtype = variant.dtype
    shape = (batch, length, features)
    positions = _tensor("int32", (batch, length), (0, 1))
    return Plan(
        "scaled_dot_product_attention",
        attention,
        attention.specs(1),
        {"block_m": block_m, "block_n": block_n, "block_e": 128, "block_ev": 128},
        {
            "query": _tensor(dtype, shape),
            "key": _tensor(dtype, shape),
            "value": _tensor(dtype, shape),
            "mask": _tensor(dtype, (batch, length, length), (0, 0, 0)),
            "row": positions,
            "column": positions,
            "scale": features**-0.5,
            "out": _tensor(dtype, shape),
            "mask_kind": attention.NO_MASK,
            "causal": causal,
            "wide": False,
        },
    )


_PLANS = {
    "rms_norm": _rms_norm,
    "elementwise": _elementwise,
    "softmax": _softmax,
    "causal_softmax": _causal_softmax,
    "rotary_embedding": _rotary_embedding,
    "gemm": _gemm,
    "scaled_dot_product_attention": _attention,
}


def rms_norm_variants() -> list[Variant]:
    return [
        Variant("rms_norm", dtype, (ndim, block))
        for ndim in (2, 3, 4)
        for dtype in DTYPES
        for block in (256, 512)
    ]


def _elementwise_variants() -> list[Variant]:
    return [
        Variant("elementwise", dtype, label=label)
        for label in _ELEMENTWISE
        for dtype in DTYPES
    ]


def _by_dtype(operator: str, dtypes=DTYPES):
    return lambda: [Variant(operator, dtype) for dtype in dtypes]


def _attention_variants() -> list[Variant]:
    return [
        Variant(
            "scaled_dot_product_attention",
            dtype,
            (causal,),
            "causal" if causal else "",
        )
        for causal in (False, True)
        for dtype in ("float16", "bfloat16")
    ]


# Every operator's default instantiations, in generation order.
VARIANTS = {
    "rms_norm": rms_norm_variants,
    "elementwise": _elementwise_variants,
    "softmax": _by_dtype("softmax"),
    "causal_softmax": _by_dtype("causal_softmax"),
    "rotary_embedding": _by_dtype("rotary_embedding"),
    "gemm": _by_dtype("gemm"),
    "scaled_dot_product_attention": _attention_variants,
}


def generate(
    output_dir: Path, variants: list[Variant], arch: int = 90, compile: bool = True
) -> dict:
    """Writes the sources (and, with `compile`, the cubins) of `variants`
    into `output_dir` and returns the manifest."""
    output_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for variant in variants:
        plan_of = _PLANS.get(variant.operator)
        if plan_of is None or variant.dtype not in TRITON_TYPE:
            raise ValueError(f"unsupported NineToothed variant: {variant.name}")
        plan = plan_of(variant)
        source_path = output_dir / f"{variant.name}.py"
        header = write_source(
            source_path,
            plan.name,
            plan.arrangement,
            plan.application_function(),
            plan.specs,
            plan.config,
            plan.num_warps,
            plan.num_stages,
        )
        entry = {
            "variant": variant.name,
            "operator": variant.operator,
            "dtype": variant.dtype,
            "kernel": plan.name,
            "config": plan.config,
            "source": source_path.name,
            "fingerprint": header["fingerprint"],
        }
        if variant.operator == "rms_norm":
            entry["ndim"], entry["block"] = variant.case
        if compile:
            entry.update(_compile(output_dir, variant, plan, header, arch))
        entries.append(entry)
    manifest = {"arch": arch, "variants": entries}
    write_atomically(
        output_dir / "manifest.json", json.dumps(manifest, indent=2).encode("utf-8")
    )
    return manifest


def _compile(output_dir: Path, variant: Variant, plan: Plan, header, arch) -> dict:
    from triton.backends.compiler import GPUTarget

    module = load_source(
        output_dir / f"{variant.name}.py", f"infini_ops_ninetoothed_aot_{variant.name}"
    )
    function = getattr(module, header["kernel"])
    kernel = KernelSource(
        function, tuple(header["parameters"]), header["grid"], header["constexprs"]
    )
    arguments, _, constexprs = kernel.arguments(plan.operands)
    source = ast_source(function, arguments, constexprs, True)
    compiled = compile_source(
        source,
        GPUTarget("cuda", arch, 32),
        {"num_warps": plan.num_warps, "num_stages": plan.num_stages},
    )
    cubin = compiled.asm["cubin"]
    write_atomically(output_dir / f"{variant.name}.cubin", cubin)
    metadata = json.dumps(compiled.metadata._asdict(), default=str, indent=1)
    write_atomically(output_dir / f"{variant.name}.json", metadata.encode("utf-8"))
    return {"cubin": f"{variant.name}.cubin", "metadata": f"{variant.name}.json"}


def can_link() -> bool:
    """Whether this machine has `libcuda`, which loading a cubin needs."""
    return ctypes.util.find_library("cuda") is not None
