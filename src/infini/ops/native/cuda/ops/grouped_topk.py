"""CUDA-like `grouped_topk` (slot 0) in Triton: a tile of tokens per program.

A program holds ``ROWS`` tokens' scores as a ``ROWS x GROUPS x PER_GROUP``
tile (experts ``g * per_group + i``; both extents padded to powers of two
and masked), turned into float32 scores ``s`` (raw or sigmoid) and selection
scores ``c = s + bias``, each packed with its expert into an int64 order key
(`native/cuda/routing.py`). A group's score is the sum of its two best
``c`` (two maxima over the group's keys, the values read back from the
keys); the `topk_group` best groups are picked by maxima over group keys,
the other groups' experts are masked, and the `topk` best experts are picked
one at a time by a maximum over the remaining keys (ties to the lower index,
NaN first: torch's order). The unbiased ``s`` of each pick is summed for
`renormalize`; the values and indices are written once per row from
register tiles.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.grouped_topk import GroupedTopk
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as
from infini.ops.native.cuda.routing import (
    NO_KEY,
    OutputStaging,
    key_expert,
    key_score,
    order_key,
    row_warps,
)
from infini.ops.native.cuda.special import sigmoid
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    next_power_of_two,
    require_device,
)

# Elements (tokens x padded experts) a program covers; the interpreter runs
# a program as NumPy steps, so it takes larger tiles.
GPU_TILE = 2048
INTERPRETER_TILE = 1 << 17


@triton.jit
def grouped_topk_kernel(
    values,
    indices,
    scores,
    bias,
    tokens,
    groups,
    per_group,
    topk_group,
    topk,
    scores_stride0,
    scores_stride1,
    bias_stride,
    values_stride0,
    values_stride1,
    indices_stride0,
    indices_stride1,
    scale,
    ROWS: tl.constexpr,
    GROUPS: tl.constexpr,
    PER_GROUP: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SIGMOID: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < tokens
    group = tl.arange(0, GROUPS)
    lane = tl.arange(0, PER_GROUP)[None, None, :]
    expert = group[None, :, None] * per_group + lane
    in_range = (group[None, :, None] < groups) & (lane < per_group)
    valid = row_mask[:, None, None] & in_range
    s = load_as(
        scores + row[:, None, None] * scores_stride0 + expert * scores_stride1,
        valid,
        tl.float32,
    )
    if SIGMOID:
        s = sigmoid(s)
    c = s + load_as(bias + expert * bias_stride, in_range, tl.float32)
    keys = tl.where(valid, order_key(c, expert), NO_KEY)

    # A group's score: its two best selection scores, summed in float32.
    first = tl.max(keys, axis=2)
    second = tl.max(tl.where(keys == first[:, :, None], NO_KEY, keys), axis=2)
    group_valid = row_mask[:, None] & (group[None, :] < groups)
    group_keys = tl.where(
        group_valid,
        order_key(key_score(first) + key_score(second), group[None, :]),
        NO_KEY,
    )
    selected = tl.zeros([ROWS, GROUPS], dtype=tl.int32)
    for _ in range(0, topk_group):
        best = tl.max(group_keys, axis=1)
        hit = group_keys == best[:, None]
        selected = tl.where(hit, 1, selected)
        group_keys = tl.where(hit, NO_KEY, group_keys)
    keys = tl.where(selected[:, :, None] != 0, keys, NO_KEY)

    slot = tl.arange(0, BLOCK_K)[None, :]
    chosen_values = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    chosen_indices = tl.zeros([ROWS, BLOCK_K], dtype=tl.int64)
    total = tl.zeros([ROWS], dtype=tl.float32)
    for j in range(0, topk):
        best = tl.max(tl.max(keys, axis=2), axis=1)
        best_expert = key_expert(best)
        hit = expert == best_expert[:, None, None]
        # The value is the unbiased score, not the key's.
        score = tl.sum(tl.sum(tl.where(hit, s, 0.0), axis=2), axis=1)
        keys = tl.where(hit, NO_KEY, keys)
        total += score
        chosen_values = tl.where(slot == j, score[:, None], chosen_values)
        chosen_indices = tl.where(slot == j, best_expert[:, None], chosen_indices)
    multiplier = tl.full([ROWS], scale, tl.float32)
    if RENORMALIZE:
        multiplier = tl.where(total != 0.0, scale / total, multiplier)
    out_mask = row_mask[:, None] & (slot < topk)
    tl.store(
        values + row[:, None] * values_stride0 + slot * values_stride1,
        chosen_values * multiplier[:, None],
        mask=out_mask,
    )
    tl.store(
        indices + row[:, None] * indices_stride0 + slot * indices_stride1,
        chosen_indices.to(indices.dtype.element_ty),
        mask=out_mask,
    )


KERNEL = Kernel(grouped_topk_kernel)


@implementation(
    operator="grouped_topk",
    devices=("nvidia",),
    slot=0,
)
class CudaGroupedTopk(GroupedTopk):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        scores, bias = args.scores, args.bias
        values, indices = args.topk_values, args.topk_indices
        per_group = self.experts // self.groups
        groups_block = next_power_of_two(self.groups)
        per_group_block = next_power_of_two(per_group)
        block = groups_block * per_group_block
        tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
        rows = max(1, min(tile // block, next_power_of_two(max(self.tokens, 1))))
        self._launch = KERNEL.bind(
            grid=(-(-self.tokens // rows),),
            arguments=(
                values,
                indices,
                scores,
                bias,
                self.tokens,
                self.groups,
                per_group,
                self.topk_group,
                self.topk,
                *scores.strides,
                bias.strides[0],
                *values.strides,
                *indices.strides,
                self.routed_scaling_factor,
            ),
            constexprs={
                "ROWS": rows,
                "GROUPS": groups_block,
                "PER_GROUP": per_group_block,
                "BLOCK_K": next_power_of_two(self.topk),
                "SIGMOID": self.sigmoid,
                "RENORMALIZE": self.renormalize,
            },
            device=self.device,
            num_warps=row_warps(block),
        )
        self.staging = OutputStaging((values, indices), (scores, bias))

    def launch(self, stream, scores, bias, topk_values, topk_indices) -> None:
        if self.tokens == 0:
            return
        outputs = (topk_values, topk_indices)
        targets = self.staging.targets(outputs, (scores, bias))
        if targets is None:
            self._launch(stream, topk_values, topk_indices, scores, bias)
            return
        with stream_context(self.device, stream):
            self._launch(stream, *targets, scores, bias)
            OutputStaging.finish(targets, outputs)
