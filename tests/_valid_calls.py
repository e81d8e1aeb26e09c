"""A small valid call of every operator with a native CPU implementation,
for the hostile-input matrix (`tests/test_hostile_matrix.py`).

`VALID_CALLS[operator](rows)` returns a `Call`: the positional arguments
(outputs included, in the operator's binding order) of a call that
succeeds, with `rows` the size of the leading (token, batch or row)
dimension: 0 gives the zero-size form of the same call. The written
tensors are not listed here: the matrix reads them from the overload the
arguments bind to (its `Tensor!` parameters).

Shapes are tiny and every call uses one dtype family per operator (float32
activations, int32/int64 indices), so that the matrix reuses the kernels
the valid call compiles.

`Call.indices` names the index inputs whose values the operator checks
(each an out-of-range value that must be rejected before anything is
written); index inputs whose out-of-range values are documented as skipped
(padding slots, ids of other ranks' experts) are not listed.

`Call.accepts` lists, per mutation of `tests/test_hostile_matrix.py`, the
parameters for which that mutation gives a call the operator documents as
valid (an input that may have any dtype, any shape...), with the reason.
`Call.poison` names the input that gets the NaN/Inf values when the first
floating-point input would not show them (a key rather than a query row of
attention, the rotated `query`).

A new operator with a native CPU implementation needs an entry here:
`test_every_native_cpu_operator_has_a_valid_call` fails until it has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Call:
    args: list
    # Parameter name -> out-of-range values for its last element.
    indices: dict = field(default_factory=dict)
    # Mutation -> {parameter name: why the mutated call is valid}.
    accepts: dict = field(default_factory=dict)
    # The input that gets a NaN (default: the first floating-point tensor
    # that is not written).
    poison: str | None = None
    # Attention operators get their NaN in a key: a NaN query row gives
    # zeros, as torch's CPU `scaled_dot_product_attention` computes it.


def _any_geometry(reason, *names):
    """`accepts` for parameters whose dtype, rank and shape are not checked
    (documented as unread)."""
    return {
        mutation: dict.fromkeys(names, reason)
        for mutation in ("dtype", "rank", "shape")
    }


def _longer_is_valid(reason, *names):
    return {"shape": dict.fromkeys(names, reason)}


def _f(*shape):
    return torch.randn(*shape)


def _out(*shape, dtype=torch.float32):
    # Outputs start as a sentinel so that a write shows.
    if dtype.is_floating_point:
        return torch.full(shape, 7.0, dtype=dtype)
    return torch.full(shape, 7, dtype=dtype)


def _ids(high, *shape, dtype=torch.int64):
    return torch.randint(0, high, shape, dtype=dtype)


# -- elementwise and row operators ----------------------------------------


def _unary(rows):
    return Call([_f(rows, 4), _out(rows, 4)])


def _binary(rows):
    return Call([_f(rows, 4), _f(rows, 4), _out(rows, 4)])


def add(rows):
    return Call([_f(rows, 4), _f(rows, 4), 0.5, _out(rows, 4)])


def add_rms_norm(rows):
    return Call([_f(rows, 8), _f(rows, 8), _f(8), 1e-6, _out(rows, 8), _out(rows, 8)])


def cast(rows):
    return Call(
        [_f(rows, 4), _out(rows, 4, dtype=torch.float64)],
        accepts={
            "dtype": {
                "input": "`cast` converts from every dtype",
                "out": "`cast` converts to every dtype",
            },
        },
    )


def cat(rows):
    return Call([[_f(rows, 3), _f(rows, 2)], 1, _out(rows, 5)])


def _softmax_like(rows):
    return Call([_f(rows, 4, 4), _out(rows, 4, 4)])


def copy(rows):
    return Call(
        [_f(rows, 4), False, _out(rows, 4)],
        accepts={
            "dtype": dict.fromkeys(("src", "out"), "`copy` converts any dtype pair")
        },
    )


def fill(rows):
    return Call(
        [_f(rows, 4), 2.5, _out(rows, 4)],
        accepts={"nan": {"input": "only `input`'s metadata is read"}},
    )


def fused_add_rms_norm(rows):
    return Call([_f(rows, 8), _f(rows, 8), _f(8), 1e-6])


def gelu(rows):
    return Call([_f(rows, 4), "tanh", _out(rows, 4)])


def rearrange_infinilm(rows):
    return Call([_f(rows, 4), _out(rows, 4)])


def rms_norm(rows):
    return Call([_f(rows, 8), _f(8), 1e-6, _out(rows, 8)])


def scaled_softmax(rows):
    return Call([_f(rows, 6), 0.5, _out(rows, 6)])


def silu_and_mul(rows):
    return Call([_f(rows, 8), _out(rows, 4)])


def softmax(rows):
    return Call([_f(rows, 6), -1, None, _out(rows, 6)])


def zeros_infinilm(rows):
    return Call(
        [_f(rows, 4), _out(rows, 4)],
        accepts={"nan": {"input": "only `input`'s metadata is read"}},
    )


# -- products and convolutions --------------------------------------------


def gemm(rows):
    return Call([_f(rows, 3), _f(3, 4), _out(rows, 4)])


def linear(rows):
    return Call([_f(rows, 3), _f(4, 3), _f(4), _out(rows, 4)])


def matmul(rows):
    return Call([_f(rows, 3), _f(3, 4), _out(rows, 4)])


def conv1d(rows):
    return Call(
        [_f(rows, 2, 8), _f(3, 2, 3), _f(3), [1], [0], [1], 1, _out(rows, 3, 6)]
    )


def conv2d(rows):
    return Call(
        [_f(rows, 2, 5, 5), _f(3, 2, 3, 3), _f(3), [1, 1], [0, 0], [1, 1], 1,
         _out(rows, 3, 3, 3)]
    )  # fmt: skip


def conv3d(rows):
    return Call(
        [_f(rows, 2, 4, 4, 4), _f(3, 2, 3, 3, 3), _f(3), [1, 1, 1], [0, 0, 0],
         [1, 1, 1], 1, _out(rows, 3, 2, 2, 2)]
    )  # fmt: skip


def conv_infinilm(rows):
    # InfiniLM's order: padding, stride, dilation.
    return Call(
        [_f(rows, 2, 5, 5), _f(3, 2, 3, 3), _f(3), [0, 0], [1, 1], [1, 1], 1,
         _out(rows, 3, 3, 3)]
    )  # fmt: skip


def convolution(rows):
    return Call(
        [_f(rows, 2, 8), _f(3, 2, 3), _f(3), [1], [0], [1], False, [0], 1,
         _out(rows, 3, 6)]
    )  # fmt: skip


def cutlass_scaled_mm(rows):
    return Call(
        [torch.randint(-8, 8, (rows, 16), dtype=torch.int8),
         torch.randint(-8, 8, (16, 8), dtype=torch.int8),
         torch.rand(1) + 0.5, torch.rand(1) + 0.5, None, torch.float32,
         _out(rows, 8)]
    )  # fmt: skip


# -- attention --------------------------------------------------------------


def scaled_dot_product_attention(rows):
    return Call(
        [_f(rows, 2, 3, 4), _f(rows, 2, 5, 4), _f(rows, 2, 5, 4), _out(rows, 2, 3, 4)],
        poison="key",
    )


def flash_attention(rows):
    # Two query and two key tokens per sequence, split by `cu_seqlens_q`.
    cu = torch.arange(rows + 1, dtype=torch.int32) * 2
    tokens = 2 * rows
    return Call(
        [_f(tokens, 2, 4), _f(tokens, 1, 4), _f(tokens, 1, 4), cu, None, None,
         2, 1, 4, 0.5, True, -1, -1, 0, _out(tokens, 2, 4)],
        indices={"cu_seqlens_q": (tokens + 1,)},
        poison="key",
    )  # fmt: skip


def flash_attn_varlen_func(rows):
    cu = torch.arange(rows + 1, dtype=torch.int32) * 2
    tokens = 2 * rows
    return Call(
        [_f(tokens, 2, 4), _f(tokens, 1, 4), _f(tokens, 1, 4), cu, cu.clone(),
         2, 2, _out(tokens, 2, 4)],
        indices={"cu_seqlens_q": (tokens + 1,), "cu_seqlens_k": (tokens + 1,)},
        poison="k",
    )  # fmt: skip


def flash_attn_with_kvcache(rows):
    # The long overload with a tensor `cache_seqlens` (an index input) and
    # one new token per sequence, appended to the caches at position 4.
    seqlens = torch.full((rows,), 4, dtype=torch.int32)
    return Call(
        [_f(rows, 2, 2, 4), _out(rows, 6, 1, 4), _out(rows, 6, 1, 4),
         _f(rows, 1, 1, 4), _f(rows, 1, 1, 4), None, None, seqlens, None, None,
         None, None, None, True, [-1, -1], 0.0, True, 0, False,
         _out(rows, 2, 2, 4), None],
        indices={"cache_seqlens": (6, -1)},
        poison="k",
    )  # fmt: skip


def _blocks(rows):
    # Two of the three cache blocks per sequence, every block used.
    return (torch.arange(2 * rows, dtype=torch.int32) % 3).reshape(rows, 2)


def paged_attention_infinilm(rows):
    # Three cache blocks of four tokens, two blocks per sequence, five tokens.
    return Call(
        [_f(rows, 2, 4), _f(3, 1, 4, 4), _f(3, 1, 4, 4),
         _blocks(rows),
         torch.full((rows,), 5, dtype=torch.int32), None, 0.5, _out(rows, 2, 4)],
        indices={"block_tables": (3, -1), "seq_lens": (9, -1)},
        poison="k_cache",
    )  # fmt: skip


def paged_attention_prefill_infinilm(rows):
    cum = torch.arange(rows + 1, dtype=torch.int32) * 2
    tokens = 2 * rows
    return Call(
        [_f(tokens, 2, 4), _f(3, 1, 4, 4), _f(3, 1, 4, 4),
         _blocks(rows),
         torch.full((rows,), 5, dtype=torch.int32), cum, None, 0.5,
         _out(tokens, 2, 4)],
        indices={
            "block_tables": (3, -1),
            "seq_lens": (9, -1),
            "cum_seq_lens_q": (tokens + 1,),
        },
        poison="k_cache",
    )  # fmt: skip


# -- caches and positions -------------------------------------------------


def kv_caching_infinilm(rows):
    return Call(
        [_f(rows, 2, 2, 4), _f(rows, 2, 2, 4), _ids(7, rows),
         _out(rows, 2, 8, 4), _out(rows, 2, 8, 4)],
        indices={"past_kv_lengths": (7, -1)},
    )  # fmt: skip


def paged_caching_infinilm(rows):
    # Slot ids are distinct (three blocks of four), negative ones skipped.
    slots = torch.randperm(12)[:rows]
    return Call(
        [_f(rows, 2, 4), _f(rows, 2, 4), slots, _out(3, 2, 4, 4), _out(3, 2, 4, 4)],
        indices={"slot_mapping": (12,)},
    )


def reshape_and_cache(rows):
    slots = torch.randperm(8)[:rows]
    scale = torch.ones(1)
    return Call(
        [_f(rows, 2, 8), _f(rows, 2, 8), _out(2, 2, 2, 4, 4), _out(2, 2, 8, 4),
         slots, scale, scale.clone(), "auto"],
        indices={"slot_mapping": (8,)},
        accepts=_any_geometry(
            'the scales are not read in "auto" mode', "k_scale", "v_scale"
        ),
    )  # fmt: skip


def reshape_and_cache_flash(rows):
    slots = torch.randperm(8)[:rows]
    scale = torch.ones(1)
    return Call(
        [_f(rows, 2, 8), _f(rows, 2, 8), slots, scale, scale.clone(), "auto",
         _out(2, 4, 2, 8), _out(2, 4, 2, 8)],
        indices={"slot_mapping": (8,)},
        accepts=_any_geometry(
            'the scales are not read in "auto" mode', "k_scale", "v_scale"
        ),
    )  # fmt: skip


def rotary_embedding(rows):
    return Call(
        [_ids(8, rows), _f(rows, 16), _f(rows, 8), _f(8, 8), 8, True],
        indices={"positions": (8, -1)},
        accepts={
            "shape": {"cos_sin_cache": "a longer cache has more positions"},
        },
        poison="query",
    )


def rotary_embedding_infinilm(rows):
    return Call(
        [_f(rows, 2, 8), _ids(8, rows), _f(8, 4), _f(8, 4), True, _out(rows, 2, 8)],
        indices={"pos_ids": (8, -1)},
    )


def embedding(rows):
    return Call(
        [torch.arange(rows) % 5, _f(5, 4), _out(rows, 4)],
        indices={"input": (5, -1)},
        accepts=_longer_is_valid("a longer table has more embeddings", "weight"),
    )


# -- quantised weights ------------------------------------------------------


def _q8_0_blocks(rows, blocks_per_row=1):
    """GGML Q8_0 blocks (type 8: a float16 scale, then 32 int8 codes) with a
    small finite scale."""
    data = torch.randint(-100, 100, (rows, blocks_per_row, 34), dtype=torch.int8)
    data = data.view(torch.uint8)
    scale = torch.full((rows, blocks_per_row, 1), 0.01, dtype=torch.float16)
    data[..., 0:2] = scale.view(torch.uint8)
    return data.reshape(rows, blocks_per_row * 34).contiguous()


def ggml_dequantize(rows):
    return Call(
        [_q8_0_blocks(max(rows, 1)), 8, rows, 32, _out(rows, 32)],
        accepts=_longer_is_valid("`weight` may have rows past `m`", "weight"),
    )


def ggml_mul_mat_a8(rows):
    return Call(
        [_q8_0_blocks(5), _f(rows, 32), 8, 5, _out(rows, 5)],
        accepts=_longer_is_valid("`weight` may have rows past `row`", "weight"),
    )


def ggml_interleave(rows):
    # Rows come in tiles of eight: `rows` tiles.
    weight = _q8_0_blocks(max(8 * rows, 8))[: 8 * rows]
    return Call([weight, 8, _out(8 * rows, 34, dtype=torch.uint8)])


def ggml_mul_mat_interleaved_a8(rows):
    # The layout's own function, not the operator: under the Triton
    # interpreter a CPU tensor stands for a GPU's, which has no
    # `ggml_interleave` (this module is imported there too).
    from infini.ops.native.cpu.ggml_interleaved import interleave

    weight = torch.from_numpy(interleave(_q8_0_blocks(8).numpy(), 8))
    return Call([weight, _f(rows, 32), 8, 5, _out(rows, 5)])


def dequantize_blockwise_8bit(rows):
    return Call(
        [torch.randint(0, 256, (rows, 64), dtype=torch.uint8), torch.rand(rows),
         torch.linspace(-1, 1, 256), 64, _out(rows, 64)]
    )  # fmt: skip


def dequantize_nf4(rows):
    return Call(
        [torch.randint(0, 256, (rows, 32), dtype=torch.uint8), torch.rand(rows), 64,
         _out(rows, 64)]
    )  # fmt: skip


def _int32_words(*shape):
    return torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32)


def awq_marlin_repack(rows):
    # size_k = 16 * rows, size_n = 64, 4 bits: (size_k, size_n / 8) words.
    size_k = 16 * rows
    weight = _int32_words(size_k, 8)
    return Call([weight, size_k, 64, 4, False, _out(rows, 128, dtype=torch.int32)])


def gptq_marlin_repack(rows):
    # Act-order: `perm` is a permutation of the rows (an index input).
    size_k = 16 * rows
    return Call(
        [_int32_words(size_k // 8, 64), torch.randperm(size_k).int(), size_k, 64,
         4, False, _out(rows, 128, dtype=torch.int32)],
        indices={"perm": (size_k, -1)},
    )  # fmt: skip


def _aligned(topk_ids, experts, block):
    """`moe_align_block_size`'s outputs, computed in Python."""
    flat = topk_ids.reshape(-1).tolist()
    numel = len(flat)
    places = numel + experts * (block - 1)
    sorted_ids = [numel] * places
    expert_ids = [0] * (places // block)
    start = 0
    for expert in range(experts):
        entries = [i for i, e in enumerate(flat) if e == expert]
        for r, entry in enumerate(entries):
            sorted_ids[start + r] = entry
        padded = math.ceil(len(entries) / block) * block
        for b in range(start // block, (start + padded) // block):
            expert_ids[b] = expert
        start += padded
    return (
        torch.tensor(sorted_ids, dtype=torch.int32),
        torch.tensor(expert_ids, dtype=torch.int32),
        torch.tensor([start], dtype=torch.int32),
    )


def moe_wna16_gemm(rows):
    # Two experts, n = 8, k = 64 in groups of 32, 4 bits, top-1 routing.
    topk_ids = (torch.arange(rows) % 2).reshape(rows, 1)
    sorted_ids, expert_ids, post_pad = _aligned(topk_ids, 2, 4)
    return Call(
        [_f(rows, 64), torch.randint(0, 256, (2, 8, 32), dtype=torch.uint8),
         torch.rand(2, 8, 2) / 16, None, None, sorted_ids, expert_ids, post_pad,
         1, 4, 8, 32, 4, _out(rows, 8)],
        accepts=_longer_is_valid(
            "`moe_align_block_size` outputs may be longer than the blocks used",
            "sorted_token_ids", "expert_ids",
        ),
    )  # fmt: skip


def moe_wna16_marlin_gemm(rows):
    # Two experts of (size_k 64, size_n 64) uint4b8 codes in Marlin's layout
    # (any int32 words are valid codes), one scale group, top-1 routing.
    topk_ids = (torch.arange(rows) % 2).reshape(rows, 1)
    sorted_ids, expert_ids, post_pad = _aligned(topk_ids, 2, 8)
    return Call(
        [_f(rows, 64), _int32_words(2, 4, 128), None, torch.rand(2, 1, 64) / 64,
         None, None, None, None, None, torch.zeros(64, dtype=torch.int32),
         sorted_ids, expert_ids, post_pad, torch.rand(rows, 1), 8, 1, True,
         1125899907892224, rows, 64, 64, True, False, True, False, -1, -1, -1,
         _out(rows, 64)],
        accepts={
            **_any_geometry("`workspace` only tunes the GPU kernel", "workspace"),
            "shape": {
                "workspace": "`workspace` only tunes the GPU kernel",
                "sorted_token_ids": "may be longer than the blocks used",
                "expert_ids": "may be longer than the blocks used",
            },
        },
    )  # fmt: skip


# -- routing and sampling ---------------------------------------------------


def get_cutlass_moe_mm_data(rows):
    # Ids outside [0, num_experts) belong to no expert: not an index error.
    return Call(
        [_ids(4, rows, 2, dtype=torch.int32), 4, 8, 16, True,
         _out(5, dtype=torch.int32), _out(4, 3, dtype=torch.int32),
         _out(4, 3, dtype=torch.int32), _out(2 * rows, dtype=torch.int32),
         _out(2 * rows, dtype=torch.int32)],
        accepts=_longer_is_valid(
            "these outputs need at least the elements they get",
            "expert_offsets", "input_permutation", "output_permutation",
        ),
    )  # fmt: skip


def grouped_topk(rows):
    return Call(
        [_f(rows, 8), _f(8), 2, 1, 2, True, 1.0, 1, _out(rows, 2),
         _out(rows, 2, dtype=torch.int32)]
    )  # fmt: skip


def moe_align_block_size(rows):
    # Ids outside [0, num_experts) are skipped: not an index error.
    places = 2 * rows + 4 * 3
    return Call(
        [_ids(4, rows, 2, dtype=torch.int32), None, 4, 4,
         _out(places, dtype=torch.int32), _out(places // 4, dtype=torch.int32),
         _out(1, dtype=torch.int32)],
        accepts=_longer_is_valid(
            "the outputs hold at least the worst case",
            "sorted_token_ids", "experts_ids",
        ),
    )  # fmt: skip


def moe_sum(rows):
    return Call([_f(rows, 2, 8), _out(rows, 8)])


def _topk_gating(rows):
    return Call(
        [_f(rows, 8), None, None, True, _out(rows, 2),
         _out(rows, 2, dtype=torch.int32), _out(rows, 2, dtype=torch.int32)]
    )  # fmt: skip


def topk_sigmoid(rows):
    return Call(
        [_f(rows, 8), None, None, True, 1.0, _out(rows, 2),
         _out(rows, 2, dtype=torch.int32), _out(rows, 2, dtype=torch.int32)]
    )  # fmt: skip


def topksoftmax_infinilm(rows):
    return Call([_f(rows, 8), 2, True, _out(rows, 2), _out(rows, 2, dtype=torch.int64)])


def random_sample_infinilm(rows):
    # `rows` is the vocabulary size here: the logits are 1-D.
    return Call(
        [_f(4 * rows), 0.5, 0.9, 3, 1.0, _out(dtype=torch.int64)],
        accepts=_longer_is_valid("any vocabulary size", "logits"),
    )


def top_k_top_p_sample_infinilm(rows):
    return Call(
        [_f(rows, 8), torch.full((rows,), 3), torch.full((rows,), 0.9), 1, 0,
         _out(rows, dtype=torch.int64)]
    )  # fmt: skip


def top_k_top_p_sampler(rows):
    return Call(
        [_f(rows, 8), torch.full((rows,), 3), torch.full((rows,), 0.9),
         _out(rows, dtype=torch.int64)]
    )  # fmt: skip


def top_k_top_p_sampling_from_logits(rows):
    # `indices` picks the logits row of each output row (an index input).
    return Call(
        [_f(rows, 8), torch.full((rows,), 3), torch.full((rows,), 0.9),
         torch.arange(rows).flip(0), "top_k_first", True, False, 1, 0,
         _out(rows, dtype=torch.int64)],
        indices={"indices": (rows, -1)},
        accepts=_longer_is_valid("`indices` picks the rows", "logits"),
    )  # fmt: skip


VALID_CALLS = {
    "add": add,
    "add_rms_norm": add_rms_norm,
    "awq_marlin_repack": awq_marlin_repack,
    "cast": cast,
    "cat": cat,
    "causal_softmax": _softmax_like,
    "causal_softmax_infinilm": _softmax_like,
    "conv1d": conv1d,
    "conv2d": conv2d,
    "conv3d": conv3d,
    "conv_infinilm": conv_infinilm,
    "convolution": convolution,
    "copy": copy,
    "cutlass_scaled_mm": cutlass_scaled_mm,
    "dequantize_blockwise_8bit": dequantize_blockwise_8bit,
    "dequantize_nf4": dequantize_nf4,
    "embedding": embedding,
    "fill": fill,
    "flash_attention": flash_attention,
    "flash_attn_varlen_func": flash_attn_varlen_func,
    "flash_attn_with_kvcache": flash_attn_with_kvcache,
    "fused_add_rms_norm": fused_add_rms_norm,
    "gelu": gelu,
    "gelu_infinilm": gelu,
    "gelutanh_infinilm": _unary,
    "gemm": gemm,
    "get_cutlass_moe_mm_data": get_cutlass_moe_mm_data,
    "ggml_dequantize": ggml_dequantize,
    "ggml_interleave": ggml_interleave,
    "ggml_mul_mat_a8": ggml_mul_mat_a8,
    "ggml_mul_mat_interleaved_a8": ggml_mul_mat_interleaved_a8,
    "ggml_mul_mat_vec_a8": ggml_mul_mat_a8,
    "gptq_marlin_repack": gptq_marlin_repack,
    "grouped_topk": grouped_topk,
    "kv_caching_infinilm": kv_caching_infinilm,
    "linear": linear,
    "matmul": matmul,
    "moe_align_block_size": moe_align_block_size,
    "moe_sum": moe_sum,
    "moe_wna16_gemm": moe_wna16_gemm,
    "moe_wna16_marlin_gemm": moe_wna16_marlin_gemm,
    "mul": _binary,
    "paged_attention_infinilm": paged_attention_infinilm,
    "paged_attention_prefill_infinilm": paged_attention_prefill_infinilm,
    "paged_caching_infinilm": paged_caching_infinilm,
    "random_sample_infinilm": random_sample_infinilm,
    "rearrange_infinilm": rearrange_infinilm,
    "relu": _unary,
    "relu_infinilm": _unary,
    "reshape_and_cache": reshape_and_cache,
    "reshape_and_cache_flash": reshape_and_cache_flash,
    "rms_norm": rms_norm,
    "rotary_embedding": rotary_embedding,
    "rotary_embedding_infinilm": rotary_embedding_infinilm,
    "scaled_dot_product_attention": scaled_dot_product_attention,
    "scaled_softmax": scaled_softmax,
    "scaled_softmax_infinilm": scaled_softmax,
    "sigmoid": _unary,
    "sigmoid_infinilm": _unary,
    "silu": _unary,
    "gelu_tanh_and_mul": silu_and_mul,
    "silu_and_mul": silu_and_mul,
    "silu_and_mul_infinilm": silu_and_mul,
    "softmax": softmax,
    "softmax_infinilm": softmax,
    "swiglu": _binary,
    "top_k_top_p_sample_infinilm": top_k_top_p_sample_infinilm,
    "top_k_top_p_sampler": top_k_top_p_sampler,
    "top_k_top_p_sampling_from_logits": top_k_top_p_sampling_from_logits,
    "topk_sigmoid": topk_sigmoid,
    "topk_softmax": _topk_gating,
    "topksoftmax_infinilm": topksoftmax_infinilm,
    "zeros_infinilm": zeros_infinilm,
}
