"""The ahead-of-time NineToothed kernels: sources and sm_90 cubins, generated
without a GPU (`scripts/generate_ninetoothed.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infini.ops.core.devices import TRITON_INTERPRETER

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("ninetoothed")


def test_the_original_has_eighteen_rms_norm_variants():
    from infini.ops.ninetoothed.aot import rms_norm_variants

    variants = rms_norm_variants()
    assert len(variants) == len({variant.name for variant in variants}) == 18


@pytest.mark.skipif(
    TRITON_INTERPRETER, reason="compiles for sm_90 (Triton's interpreter is off)"
)
def test_two_rms_norm_variants_compile_offline(tmp_path):
    output = tmp_path / "ninetoothed"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "generate_ninetoothed.py"),
            "--source-dir",
            str(ROOT),
            "--output-dir",
            str(output),
            "--limit",
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "2 variant(s) generated" in result.stdout
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["arch"] == 90
    assert len(manifest["variants"]) == 2
    for entry in manifest["variants"]:
        assert (output / entry["source"]).read_text().startswith("# infini-ops")
        assert (output / entry["cubin"]).stat().st_size > 0
        metadata = json.loads((output / entry["metadata"]).read_text())
        assert metadata["name"] == "infini_ops_ninetoothed_rms_norm"


def test_every_slot_nine_kernel_has_default_instantiations():
    from infini.ops.ninetoothed.aot import VARIANTS

    variants = [variant for variants in VARIANTS.values() for variant in variants()]
    assert len(variants) == len({variant.name for variant in variants})
    kernels = {variant.operator for variant in variants}
    assert kernels == {
        "rms_norm",
        "elementwise",
        "softmax",
        "causal_softmax",
        "rotary_embedding",
        "gemm",
        "scaled_dot_product_attention",
    }
    labels = {variant.label for variant in VARIANTS["elementwise"]()}
    assert labels == {"add", "mul", "silu", "swiglu", "gelu", "gelu_tanh"} | {
        "silu_and_mul"
    }


@pytest.mark.skipif(
    TRITON_INTERPRETER, reason="compiles for sm_90 (Triton's interpreter is off)"
)
def test_gemm_rotary_and_attention_variants_compile_offline(tmp_path):
    from infini.ops.ninetoothed import aot

    chosen = {
        "gemm_float16",
        "rotary_embedding_bfloat16",
        "scaled_dot_product_attention_causal_float16",
        "silu_and_mul_bfloat16",
    }
    variants = [
        variant
        for variants in aot.VARIANTS.values()
        for variant in variants()
        if variant.name in chosen
    ]
    assert len(variants) == len(chosen)
    manifest = aot.generate(tmp_path, variants)
    assert manifest["arch"] == 90
    for entry in manifest["variants"]:
        source = (tmp_path / entry["source"]).read_text()
        assert source.startswith("# infini-ops-ninetoothed: ")
        assert (tmp_path / entry["cubin"]).stat().st_size > 0
        metadata = json.loads((tmp_path / entry["metadata"]).read_text())
        assert metadata["name"] == f"infini_ops_ninetoothed_{entry['kernel']}"
        assert metadata["target"].startswith("GPUTarget(backend='cuda', arch=90")


def test_unknown_operators_are_refused(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "generate_ninetoothed.py"),
            "--source-dir",
            str(ROOT),
            "--output-dir",
            str(tmp_path),
            "--ops",
            "rms_norm,convolution",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "unsupported NineToothed ops: convolution" in result.stderr
