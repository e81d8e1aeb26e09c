"""Generate the ahead-of-time NineToothed kernels (slot 9).

    python scripts/generate_ninetoothed.py --source-dir . --output-dir DIR \
        [--ops rms_norm,gemm,...] [--limit N] [--arch 90] [--no-compile]

Writes each variant's Triton source, its cubin for `--arch` (compiled with
Triton's bundled `ptxas`, no GPU needed) and `manifest.json` into DIR (see
`infini.ops.ninetoothed.aot`). `--ops` names kernels of `aot.VARIANTS`
(`rms_norm`, `elementwise`, `softmax`, `causal_softmax`, `rotary_embedding`,
`gemm`, `scaled_dot_product_attention`; default: all of them, `rms_norm`
first); `--limit` keeps the first N variants (CI).
Exits 0 after printing that loading the cubins needs `libcuda` when the
machine has none: generation is complete, linking is for a GPU machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-dir", type=Path, default=Path("."))
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--ops", default="all")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--no-compile", action="store_true")
    arguments = parser.parse_args(argv)
    sys.path.insert(0, str((arguments.source_dir / "src").resolve()))

    from infini.ops.ninetoothed import aot

    names = [name for name in arguments.ops.replace(";", ",").split(",") if name]
    if names == ["all"]:
        names = list(aot.VARIANTS)
    unknown = [name for name in names if name not in aot.VARIANTS]
    if unknown:
        raise ValueError(f"unsupported NineToothed ops: {', '.join(unknown)}")
    variants = [variant for name in names for variant in aot.VARIANTS[name]()]
    if arguments.limit is not None:
        variants = variants[: arguments.limit]
    manifest = aot.generate(
        arguments.output_dir,
        variants,
        arch=arguments.arch,
        compile=not arguments.no_compile,
    )
    print(
        f"NineToothed: {len(manifest['variants'])} variant(s) generated in "
        f"{arguments.output_dir}"
    )
    if not arguments.no_compile and not aot.can_link():
        print(aot.LINK_UNAVAILABLE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
