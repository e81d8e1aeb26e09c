"""Reference helpers shared by the Marlin tests: packing in the GPTQ and AWQ
formats, reading the Marlin layout back (written here in plain torch, from
vLLM's description of the layout, sharing no code with the library), and
vLLM's own layout helpers when they can be loaded."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import torch

# Codes of one int32, in order of their bit positions, per (bits, 8-bit
# activations): the positions of the block's elements before interleaving.
INTERLEAVE = {
    (4, False): (0, 2, 4, 6, 1, 3, 5, 7),
    (8, False): (0, 2, 1, 3),
    (4, True): (0, 4, 1, 5, 2, 6, 3, 7),
    (8, True): (0, 1, 2, 3),
}
AWQ_ORDER = {4: (0, 2, 4, 6, 1, 3, 5, 7), 8: (0, 2, 1, 3)}


def to_int32(words: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2^32) as the int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def codes_of(words: torch.Tensor, num_bits: int) -> torch.Tensor:
    """The codes of int32 `words` along a new last dimension, lowest bits
    first."""
    pack = 32 // num_bits
    wide = words.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(pack) * num_bits
    return (wide.unsqueeze(-1) >> shifts) & ((1 << num_bits) - 1)


def words_of(codes: torch.Tensor, num_bits: int) -> torch.Tensor:
    """Inverse of `codes_of`: the last dimension (``32 / num_bits`` codes)
    packed into int32."""
    shifts = torch.arange(codes.shape[-1]) * num_bits
    return to_int32((codes.to(torch.int64) << shifts).sum(-1))


def gptq_pack(weight: torch.Tensor, num_bits: int) -> torch.Tensor:
    """``(k, n)`` codes packed along k: ``(k / pack, n)`` int32."""
    k, n = weight.shape
    pack = 32 // num_bits
    grouped = weight.reshape(k // pack, pack, n).transpose(1, 2)
    return words_of(grouped, num_bits)


def awq_pack(weight: torch.Tensor, num_bits: int) -> torch.Tensor:
    """``(k, n)`` codes packed along n in AWQ's order: ``(k, n / pack)``."""
    k, n = weight.shape
    pack = 32 // num_bits
    grouped = weight.reshape(k, n // pack, pack)[..., list(AWQ_ORDER[num_bits])]
    return words_of(grouped, num_bits)


def _source_of_codes(size_k, size_n, num_bits, is_a_8bit):
    """(row, column) of the matrix element each code of the Marlin layout
    holds, for every flat code position."""
    rows_per_block, columns_per_block = (32, 32) if is_a_8bit else (16, 64)
    position = torch.arange(size_k * size_n)
    row_block = position // (rows_per_block * size_n)
    chunk = (position % (rows_per_block * size_n)) // 1024
    p = position % 1024
    interleave = torch.tensor(INTERLEAVE[(num_bits, is_a_8bit)])
    group = len(interleave)
    u = (p // group) * group + interleave[p % group]
    # Lane `lane` of the tensor-core fragment holds column `lane // 4` of
    # each 8-column half of each 16-column tile, and rows `rows_per_lane`
    # apart (2 or 4 consecutive rows, then the same 8 or 16 rows further).
    lane = u // 32
    if is_a_8bit:
        tile, within = (u // 16) % 2, u % 16
        half, index = within // 8, within % 8
        row = 4 * (lane % 4) + index % 4 + 16 * (index // 4)
    else:
        tile, within = (u // 8) % 4, u % 8
        half, index = within // 4, within % 4
        row = 2 * (lane % 4) + index % 2 + 8 * (index // 2)
    column = 16 * tile + lane // 4 + 8 * half
    return (
        row_block * rows_per_block + row,
        chunk * columns_per_block + column,
    )


def marlin_unpack(packed, size_k, size_n, num_bits, is_a_8bit=False):
    """The ``(size_k, size_n)`` codes a Marlin-packed tensor holds."""
    codes = codes_of(packed.reshape(-1), num_bits).reshape(-1)
    rows, columns = _source_of_codes(size_k, size_n, num_bits, is_a_8bit)
    weight = torch.empty(size_k, size_n, dtype=torch.int64)
    weight[rows, columns] = codes
    return weight


def marlin_pack(weight, num_bits, is_a_8bit=False):
    """Inverse of `marlin_unpack` (used to build inputs independently of
    the library's repacks)."""
    size_k, size_n = weight.shape
    rows, columns = _source_of_codes(size_k, size_n, num_bits, is_a_8bit)
    codes = weight[rows, columns].reshape(-1, 32 // num_bits)
    return words_of(codes, num_bits).reshape(size_k // 16, -1)


# Scale, zero-point and bias columns are stored permuted in runs: stored
# position `q` of a run holds the run's column `permutation[q]`.
SCALE_PERM = [i + 8 * j for i in range(8) for j in range(8)]
SCALE_PERM_SINGLE = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]


def permute_columns(values, permutation):
    run = len(permutation)
    shape = values.shape
    return values.reshape(-1, run)[:, permutation].reshape(shape)


def marlin_scales(scales):
    """``(..., groups, n)`` scales in Marlin's order."""
    grouped = scales.shape[-2] > 1
    return permute_columns(scales, SCALE_PERM if grouped else SCALE_PERM_SINGLE)


def marlin_bias(bias):
    return permute_columns(bias, SCALE_PERM_SINGLE)


def marlin_zeros(zeros, num_bits):
    """``(..., groups, n)`` zero-point codes in Marlin's packed order:
    permuted like grouped scales, interleaved like the weights, packed in
    order along n."""
    permuted = permute_columns(zeros, SCALE_PERM)
    interleaved = permute_columns(permuted, list(INTERLEAVE[(num_bits, False)]))
    shape = interleaved.shape
    codes = interleaved.reshape(*shape[:-1], shape[-1] // (32 // num_bits), -1)
    return words_of(codes, num_bits)


_VLLM_UTILS = "vllm/model_executor/layers/quantization/utils"
_VLLM_FUNCTIONS = {
    "quant_utils.py": ("get_pack_factor", "pack_rows", "pack_cols", "awq_pack"),
    "marlin_utils_test.py": (
        "marlin_permute_weights",
        "marlin_weights",
        "get_weight_perm",
    ),
}


def vllm_layout():
    """vLLM's pure-Python layout helpers (`marlin_weights`,
    `get_weight_perm`, ...) as a namespace dict, or a reason why they are
    unavailable. Importing their modules needs vLLM's server dependencies,
    so the functions are read from the installed sources instead."""
    import numpy

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None, "vllm is not installed"
    root = Path(next(iter(spec.submodule_search_locations))).parent
    namespace = {"np": numpy, "numpy": numpy, "torch": torch, "GPTQ_MARLIN_TILE": 16}
    for file, names in _VLLM_FUNCTIONS.items():
        path = root / _VLLM_UTILS / file
        if not path.exists():
            return None, f"vLLM has no {_VLLM_UTILS}/{file}"
        tree = ast.parse(path.read_text())
        found = [
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name in names
        ]
        if len(found) != len(names):
            return None, f"vLLM's {file} lacks one of {names}"
        exec(compile(ast.Module(found, []), str(path), "exec"), namespace)
    return namespace, ""
