"""CUDA-like `topk_softmax` (slot 0) in Triton: a tile of tokens per program.

Each token's row of expert scores goes through a float32 softmax; the top
`topk` experts are picked one at a time by a maximum over packed int64 keys,
``(order(score + bias) << 32) | (2^31 - 1 - expert)``, where `order` maps a
float32 to an int32 with the same order (NaN above every number, -0 equal
to +0): one reduction gives the best score and, among equal scores, the
lower expert id (torch's top-k order). Weights, ids and token indices are
written once per row from register tiles.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.topk_softmax import TopkSoftmax
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as, store_as
from infini.ops.native.cuda.special import exp
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    Pointer,
    next_power_of_two,
    require_device,
    staging_like,
)

# Elements (tokens x experts) a program covers: several tokens share one
# when experts are few. The interpreter runs a program as NumPy steps.
GPU_TILE = 2048
INTERPRETER_TILE = 32768


@triton.jit
def order_key(score, expert):
    """The int64 key whose maximum is torch's first top-k choice."""
    score = tl.where(score == 0.0, 0.0, score)
    bits = score.to(tl.int32, bitcast=True)
    order = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    order = tl.where(score != score, 0x7FFFFFFF, order)
    return (order.to(tl.int64) << 32) | (0x7FFFFFFF - expert).to(tl.int64)


@triton.jit
def topk_gating_kernel(
    weights,
    ids,
    token_ids,
    gating,
    bias,
    padding,
    tokens,
    experts,
    topk,
    gating_stride0,
    gating_stride1,
    bias_stride,
    padding_stride,
    weights_stride0,
    weights_stride1,
    ids_stride0,
    ids_stride1,
    token_ids_stride0,
    token_ids_stride1,
    scale,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SOFTMAX: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_PADDING: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < tokens
    expert = tl.arange(0, BLOCK)[None, :]
    valid = row_mask[:, None] & (expert < experts)
    x = load_as(
        gating + row[:, None] * gating_stride0 + expert * gating_stride1,
        valid,
        tl.float32,
    )
    if SOFTMAX:
        x = tl.where(valid, x, -float("inf"))
        maximum = tl.max(x, axis=1)[:, None]
        e = tl.where(valid, exp(x - maximum), 0.0)
        scores = e * (1.0 / tl.sum(e, axis=1)[:, None])
    else:
        scores = 1.0 / (1.0 + exp(-x))
    choice = scores
    if HAS_BIAS:
        b = load_as(bias + expert * bias_stride, expert < experts, tl.float32)
        choice = scores + b
    keys = tl.where(valid, order_key(choice, expert), -(2**63))
    slot = tl.arange(0, BLOCK_K)[None, :]
    chosen_weights = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    chosen_ids = tl.zeros([ROWS, BLOCK_K], dtype=tl.int64)
    total = tl.zeros([ROWS], dtype=tl.float32)
    for j in range(0, topk):
        best = tl.max(keys, axis=1)
        best_expert = (0x7FFFFFFF - (best & 0x7FFFFFFF))[:, None]
        hit = expert == best_expert
        score = tl.sum(tl.where(hit, scores, 0.0), axis=1)
        keys = tl.where(hit, -(2**63), keys)
        total += score
        chosen_weights = tl.where(slot == j, score[:, None], chosen_weights)
        chosen_ids = tl.where(slot == j, best_expert, chosen_ids)
    multiplier = tl.full([ROWS], scale, tl.float32)
    if RENORMALIZE:
        multiplier = tl.where(total != 0.0, scale / total, multiplier)
    chosen_weights = chosen_weights * multiplier[:, None]
    if HAS_PADDING:
        flag = tl.load(padding + row * padding_stride, mask=row_mask, other=0)
        padded = (flag != 0)[:, None]
        chosen_weights = tl.where(padded, 0.0, chosen_weights)
        chosen_ids = tl.where(padded, -1, chosen_ids)
    out_mask = row_mask[:, None] & (slot < topk)
    store_as(
        weights + row[:, None] * weights_stride0 + slot * weights_stride1,
        chosen_weights,
        out_mask,
    )
    tl.store(
        ids + row[:, None] * ids_stride0 + slot * ids_stride1,
        chosen_ids.to(ids.dtype.element_ty),
        mask=out_mask,
    )
    tl.store(
        token_ids + row[:, None] * token_ids_stride0 + slot * token_ids_stride1,
        (slot.to(tl.int64) * tokens + row[:, None]).to(token_ids.dtype.element_ty),
        mask=out_mask,
    )


KERNEL = Kernel(topk_gating_kernel)


class TopkGatingLaunch:
    """Plans the gating kernel for `TopkGating` bases (`self.tokens`,
    `self.experts`, `self.topk` and `self.renormalize` set by the base).
    Outputs that overlap an input other than element for element are
    computed into staging buffers."""

    def plan(self, softmax, gating, bias, padding, outputs, scale) -> None:
        tokens, experts, topk = self.tokens, self.experts, self.topk
        block = max(next_power_of_two(experts), 16)
        tile = INTERPRETER_TILE if INTERPRETER else GPU_TILE
        rows = max(1, min(tile // block, next_power_of_two(max(tokens, 1))))
        self.has_bias = bias is not None
        self.has_padding = padding is not None
        placeholder = Pointer(gating.dtype)
        weights, ids, token_ids = outputs
        self._launch = KERNEL.bind(
            grid=(-(-tokens // rows),),
            arguments=(
                weights,
                ids,
                token_ids,
                gating,
                bias if bias is not None else placeholder,
                padding if padding is not None else placeholder,
                tokens,
                experts,
                topk,
                *gating.strides,
                bias.strides[0] if bias is not None else 0,
                padding.strides[0] if padding is not None else 0,
                *weights.strides,
                *ids.strides,
                *token_ids.strides,
                float(scale),
            ),
            constexprs={
                "ROWS": rows,
                "BLOCK": block,
                "BLOCK_K": max(next_power_of_two(topk), 1),
                "SOFTMAX": softmax,
                "HAS_BIAS": bias is not None,
                "HAS_PADDING": padding is not None,
                "RENORMALIZE": self.renormalize,
            },
            device=self.device,
            num_warps=4 if block <= 1024 else 8,
        )
        inputs = tuple(m for m in (gating, bias, padding) if m is not None)
        self.guards = tuple(OverlapGuard(meta, inputs) for meta in outputs)

    def run(self, stream, gating, bias, padding, weights, ids, token_ids) -> None:
        if self.tokens == 0:
            return
        inputs = tuple(t for t in (gating, bias, padding) if t is not None)
        outputs = (weights, ids, token_ids)
        staged = [guard(out, inputs) for guard, out in zip(self.guards, outputs)]
        bias = gating if bias is None else bias
        padding = gating if padding is None else padding
        if not any(staged):
            self._launch(stream, weights, ids, token_ids, gating, bias, padding)
            return
        with stream_context(self.device, stream):
            targets = [
                staging_like(out) if stage else out
                for out, stage in zip(outputs, staged)
            ]
            self._launch(stream, *targets, gating, bias, padding)
            for out, target in zip(outputs, targets):
                if target is not out:
                    out.copy_(target)


@implementation(
    operator="topk_softmax",
    devices="cuda_like",
    slot=0,
)
class CudaTopkSoftmax(TopkGatingLaunch, TopkSoftmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self.plan(
            True,
            args.gating_output,
            args.bias,
            args.is_padding,
            (args.topk_weights, args.topk_indices, args.token_expert_indices),
            1.0,
        )

    def launch(
        self,
        stream,
        gating_output,
        bias,
        is_padding,
        topk_weights,
        topk_indices,
        token_expert_indices,
    ) -> None:
        self.run(
            stream,
            gating_output,
            bias,
            is_padding,
            topk_weights,
            topk_indices,
            token_expert_indices,
        )
