"""Host time of a cached slot-9 (NineToothed) call, with the launch stubbed.

No GPU is needed: under `INFINI_OPS_TRITON_INTERPRET=1` CPU tensors stand in
for NVIDIA ones, and the launch runtime is made to take its NVIDIA path
(`Launch._direct`: data pointers into the argument template, alignment
check, the compiled kernel's launcher) with a compiled kernel whose `run`
does nothing. What is measured is therefore everything our code does on the
host for a cached call (binder, dispatch cache, the operator's `launch`, the
bound launch) except the driver's kernel launch itself. Slot 0 (the native
Triton kernel, the same launch path) is measured the same way beside it.

    INFINI_OPS_TRITON_INTERPRET=1 INFINI_OPS_MANIFEST=<manifest with
    --with-ninetoothed> python benchmarks/ninetoothed_host_overhead.py
    [--rounds 20] [--calls 5000] [--write]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "ninetoothed_host_overhead.md"


class _StubbedKernel:
    """What `Launch._direct` reads from a compiled kernel; `run` is a no-op."""

    function = None
    packed_metadata = None

    @staticmethod
    def run(*arguments) -> None:
        return None


def _stub_launches() -> None:
    from infini.ops.runtime import triton as runtime

    runtime.uses_direct_launch = lambda device: True
    runtime.compile_for_device = lambda *arguments: _StubbedKernel()
    runtime._gpu_count = lambda: 1


def _best(function, rounds: int, calls: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--write", action="store_true", help=f"append to {RESULTS}")
    options = parser.parse_args()

    import torch

    import infini.ops
    from infini.ops.core.devices import TRITON_INTERPRETER

    if not TRITON_INTERPRETER:
        sys.exit("run with INFINI_OPS_TRITON_INTERPRET=1 (see the docstring)")
    _stub_launches()
    torch.set_num_threads(1)
    x, w = torch.randn(4, 4096), torch.randn(4096)
    a, b = torch.randn(4, 4096), torch.randn(4, 4096)
    out = torch.empty(4, 4096)
    cases = {}
    for slot in (0, 9):
        cases[f"`rms_norm` (4, 4096) fp32, slot {slot}"] = lambda slot=slot: (
            infini.ops.rms_norm(x, w, 1e-6, out, implementation_index=slot)
        )
        cases[f"`add` (4, 4096) fp32, slot {slot}"] = lambda slot=slot: infini.ops.add(
            a, b, out, implementation_index=slot
        )
    gated = torch.cat([a, b], -1)
    cases["`silu_and_mul` (4, 8192) -> (4, 4096) fp32, slot 9"] = lambda: (
        infini.ops.silu_and_mul(gated, out, implementation_index=9)
    )
    cases["`silu_and_mul` (4, 8192) -> (4, 4096) fp32, slot 0"] = lambda: (
        infini.ops.silu_and_mul(gated, out, implementation_index=0)
    )
    # The kernels of a decoder layer beyond the elementwise ones.
    activations, weight_t = torch.randn(4, 4096), torch.randn(4096, 4096).t()
    product = torch.empty(4, 4096)
    cases["`gemm` (4, 4096) x (4096, 4096)^T fp32, slot 9"] = lambda: infini.ops.gemm(
        activations, weight_t, product, implementation_index=9
    )
    positions = torch.arange(4)
    query, key = torch.randn(4, 32 * 128), torch.randn(4, 8 * 128)
    cos_sin = torch.randn(64, 128)
    for slot in (0, 9):
        cases[f"`rotary_embedding` 4 tokens, 32+8 heads of 128, slot {slot}"] = (
            lambda slot=slot: infini.ops.rotary_embedding(
                positions, query, key, cos_sin, 128, True, implementation_index=slot
            )
        )
    q = torch.randn(1, 32, 4, 128)
    k, v = torch.randn(1, 8, 64, 128), torch.randn(1, 8, 64, 128)
    attended = torch.empty(1, 32, 4, 128)
    cases["`scaled_dot_product_attention` GQA 32/8 heads, 4 x 64, slot 9"] = lambda: (
        infini.ops.scaled_dot_product_attention(
            q, k, v, None, 0.0, False, None, True, attended, implementation_index=9
        )
    )
    # The machine's speed at the time: the small torch call that
    # `benchmarks/results/host_overhead.md` measures (0.8 µs on an idle
    # machine of this type).
    small, small_out = torch.randn(13, 4), torch.empty(13, 4)
    cases["`torch.add(..., out=)` (13, 4) fp32, CPU (load reference)"] = lambda: (
        torch.add(small, small, out=small_out)
    )
    # The implementation's own share: its `launch` (overlap check, bound
    # launch) called directly, without the binder and the dispatch cache.
    from infini.ops.core.devices import Device
    from infini.ops.core.operator import Arguments
    from infini.ops.core.tensor import TensorMeta
    from infini.ops.native.cuda.ops.rms_norm import CudaRmsNorm
    from infini.ops.ninetoothed.ops.rms_norm import NineToothedRmsNorm

    nvidia = Device("nvidia", 0)

    def meta(tensor):
        return TensorMeta(
            tuple(tensor.shape), tuple(tensor.stride()), "float32", nvidia
        )

    values = {"input": meta(x), "weight": meta(w), "out": meta(out), "eps": 1e-6}
    for slot, cls in ((0, CudaRmsNorm), (9, NineToothedRmsNorm)):
        operator = cls(Arguments(values, nvidia, 0))
        cases[f"`rms_norm` slot {slot}: the implementation's `launch` only"] = (
            lambda operator=operator: operator.launch(0, x, w, out)
        )
    from infini.ops.ninetoothed.ops.gemm import NineToothedGemm
    from infini.ops.ninetoothed.ops.scaled_dot_product_attention import (
        NineToothedScaledDotProductAttention,
    )

    gemm = NineToothedGemm(
        Arguments(
            {
                "a": meta(activations),
                "b": meta(weight_t),
                "y": meta(product),
                "c": None,
                "alpha": None,
                "beta": None,
                "trans_a": None,
                "trans_b": None,
            },
            nvidia,
            0,
        )
    )
    cases["`gemm` slot 9: the implementation's `launch` only"] = lambda: gemm.launch(
        0, activations, weight_t, None, product
    )
    attention = NineToothedScaledDotProductAttention(
        Arguments(
            {
                "query": meta(q),
                "key": meta(k),
                "value": meta(v),
                "out": meta(attended),
                "attn_mask": None,
                "dropout_p": 0.0,
                "is_causal": False,
                "scale": None,
                "enable_gqa": True,
            },
            nvidia,
            0,
        )
    )
    cases[
        "`scaled_dot_product_attention` slot 9: the implementation's `launch` only"
    ] = lambda: attention.launch(0, q, k, v, None, attended)
    for function in cases.values():
        function()  # builds and caches the operator (and generates slot 9)
    results = {
        name: _best(f, options.rounds, options.calls) for name, f in cases.items()
    }
    lines = [
        f"## {date.today()} on {platform.machine()} "
        f"({platform.processor() or 'unknown CPU'}), launch stubbed",
        "",
        f"Python {platform.python_version()}, torch {torch.__version__}; "
        f"{options.rounds} rounds x {options.calls} calls, minimum of the "
        "per-round mean.",
        "",
        "| call | µs per call (host, launch stubbed) |",
        "|---|---|",
        *(f"| {name} | {value:.2f} |" for name, value in results.items()),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if options.write:
        if not RESULTS.exists():
            RESULTS.write_text(
                "# Host cost of a cached NineToothed (slot 9) call\n\n"
                "`benchmarks/ninetoothed_host_overhead.py --write` appends a "
                "section here (see its docstring for the method). The target is "
                "at most 8 µs of host time on top of the kernel launch.\n\n"
            )
        with RESULTS.open("a") as file:
            file.write(text + "\n")


if __name__ == "__main__":
    main()
