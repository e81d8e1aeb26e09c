"""Ahead-of-time NineToothed kernels: sources and sm_90 cubins, built offline.

`WITH_NINETOOTHED=ON` with `GENERATE_OPERATOR_CALL_INSTANTIATIONS=ON` runs
`scripts/generate_ninetoothed.py`, which calls `generate` for the variants
the original builds: `rms_norm` for ranks 2-4, float32/float16/bfloat16 and
blocks of 256 and 512 columns (18). Each variant gets

- ``<variant>.py``: the generated Triton source (the same text the JIT path
  writes to the cache, fingerprint header included);
- ``<variant>.cubin`` and ``<variant>.json``: the kernel compiled by
  Triton's NVIDIA backend with its bundled `ptxas` for the target (sm_90 by
  default), and Triton's metadata;

and ``manifest.json`` lists them. No GPU and no driver are needed up to
here. Loading a cubin into a CUDA context needs `libcuda`; on a machine
without it the generator stops after compiling and says so
(`LINK_UNAVAILABLE`).

The compiled signature is that of contiguous rows whose length is a
multiple of 16 (the usual hidden sizes): last-dimension strides equal to 1
(Triton compiles the constant in) and 16-divisible row strides.
"""

from __future__ import annotations

import ctypes.util
import json
from dataclasses import dataclass
from pathlib import Path

from infini.ops.runtime.cache import write_atomically
from infini.ops.runtime.triton import TRITON_TYPE, Pointer, ast_source

from .generation import load_source, write_source

DTYPES = ("float32", "float16", "bfloat16")
LINK_UNAVAILABLE = (
    "NineToothed ahead-of-time kernels: sources and cubins were generated, but "
    "loading them (the link step of the original's build) needs `libcuda`, "
    "which this machine does not have; a GPU machine loads them at run time."
)


@dataclass(frozen=True)
class Variant:
    operator: str
    ndim: int
    dtype: str
    block: int

    @property
    def name(self) -> str:
        return f"{self.operator}_ndim{self.ndim}_{self.dtype}_block{self.block}"


def rms_norm_variants() -> list[Variant]:
    return [
        Variant("rms_norm", ndim, dtype, block)
        for ndim in (2, 3, 4)
        for dtype in DTYPES
        for block in (256, 512)
    ]


VARIANTS = {"rms_norm": rms_norm_variants}


def _rms_norm_arguments(variant: Variant):
    """Example runtime arguments with the specialisations of contiguous rows
    of a 16-multiple length, and the constexprs."""
    import triton.language as tl

    rows = [17] * (variant.ndim - 1)
    hidden = 4096
    strides = [hidden * 16] * (variant.ndim - 2) + [hidden, 1]
    pointer = Pointer(variant.dtype)
    tensor = [pointer, *rows, hidden, *strides]
    weight = [pointer, *rows, hidden, *([0] * (variant.ndim - 1)), 1]
    values = tensor + weight + [1e-6, hidden] + tensor
    return values, {"ninetoothed_constexpr_prefix_compute": tl.float32}


def generate(
    output_dir: Path, variants: list[Variant], arch: int = 90, compile: bool = True
) -> dict:
    """Writes the sources (and, with `compile`, the cubins) of `variants`
    into `output_dir` and returns the manifest."""
    from .ops import rms_norm

    output_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for variant in variants:
        if variant.operator != "rms_norm" or variant.dtype not in TRITON_TYPE:
            raise ValueError(f"unsupported NineToothed variant: {variant.name}")
        source_path = output_dir / f"{variant.name}.py"
        header = write_source(
            source_path,
            "rms_norm",
            rms_norm.arrangement,
            rms_norm.application,
            rms_norm.specs(variant.ndim),
            {"block": variant.block},
        )
        entry = {
            "variant": variant.name,
            "operator": variant.operator,
            "ndim": variant.ndim,
            "dtype": variant.dtype,
            "block": variant.block,
            "source": source_path.name,
            "fingerprint": header["fingerprint"],
        }
        if compile:
            entry.update(_compile(output_dir, variant, header, arch))
        entries.append(entry)
    manifest = {"arch": arch, "variants": entries}
    write_atomically(
        output_dir / "manifest.json", json.dumps(manifest, indent=2).encode("utf-8")
    )
    return manifest


def _compile(output_dir: Path, variant: Variant, header: dict, arch: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    module = load_source(
        output_dir / f"{variant.name}.py", f"infini_ops_ninetoothed_aot_{variant.name}"
    )
    function = getattr(module, header["kernel"])
    arguments, constexprs = _rms_norm_arguments(variant)
    source = ast_source(function, arguments, constexprs, True)
    compiled = triton.compile(
        source,
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": 4, "num_stages": 3},
    )
    cubin = compiled.asm["cubin"]
    write_atomically(output_dir / f"{variant.name}.cubin", cubin)
    metadata = json.dumps(compiled.metadata._asdict(), default=str, indent=1)
    write_atomically(output_dir / f"{variant.name}.json", metadata.encode("utf-8"))
    return {"cubin": f"{variant.name}.cubin", "metadata": f"{variant.name}.json"}


def can_link() -> bool:
    """Whether this machine has `libcuda`, which loading a cubin needs."""
    return ctypes.util.find_library("cuda") is not None
