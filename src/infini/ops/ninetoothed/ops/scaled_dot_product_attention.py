"""NineToothed `scaled_dot_product_attention` (slot 9, NVIDIA): flash-style
attention, one ``(block_m, features)`` tile of queries per program.

Every operand is seen with the batch dimensions of `out` (broadcast ones
with stride 0, grouped-query heads split so that a key/value head is a
stride-0 dimension over the query heads that share it), then the batch
dimensions are merged where every operand allows (`coalesce`), so that one
kernel per number of batch dimensions serves every layout.

Arrangement: `query` and `out` are cut into ``(block_m, features)`` tiles
(the whole feature dimension in one tile); the program of tile
``(batch..., i)`` gets every ``(block_n, features)`` tile of `key` and
`value` of its batch, the ``(block_m, block_n)`` tiles of `attn_mask` on
its rows, and the positions of its rows and of each key tile (stride-0
views of one ``arange``, made once per geometry, as `causal_softmax` reads
them). Application: for each key tile, the scores ``q @ k^T * scale`` in
float32, masked (keys past the end, ``j > i`` when causal, `False` in a
bool mask) or shifted (a float mask); the running row maximum, the sum of
exponentials and the weighted sum of values rescaled to it (the online
softmax), and finally their quotient, 0 for a row with nothing left.
16-bit operands are multiplied exactly into float32 (upcast first under
Triton's interpreter); the result is rounded once when stored.

Not at slot 9 (a `ValueError` naming the operator and slot 9, before any
write): ``0 < dropout_p < 1`` (the base draws the dropout mask from torch's
CPU generator; ``dropout_p == 1`` gives zeros, as at every slot), ``E = 0``,
and key and value head counts whose group sizes do not divide one another.
"""

from __future__ import annotations

import ninetoothed.language as ntl

from infini.ops.base.scaled_dot_product_attention import ScaledDotProductAttention
from infini.ops.core.geometry import broadcast_strides, coalesce
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.core.tensor import TensorMeta
from infini.ops.ninetoothed.generation import TensorSpec, kernel_source
from infini.ops.ninetoothed.language import dot_operand, upcast
from infini.ops.ninetoothed.launch import bind_kernel, tensor_operand
from infini.ops.runtime.triton import (
    INTERPRETER,
    OverlapGuard,
    next_power_of_two,
    require_device,
    staging_like,
    torch_device,
)

# Query rows and key rows per tile on a GPU; the interpreter runs a tile as
# one NumPy step, so it takes larger ones.
GPU_BLOCKS = (64, 64)
INTERPRETER_BLOCKS = (64, 128)
MIN_BLOCK = 16

# `mask_kind`: no mask, a bool mask (kept where nonzero), an additive mask.
NO_MASK, BOOL_MASK, ADDITIVE_MASK = 0, 1, 2


def _queries(tensor, batch, block_m, block_columns):
    """`(batch..., query tiles)` of ``(block_m, block_columns)`` tiles (all
    the columns)."""
    tiled = tensor.tile((1,) * batch + (block_m, block_columns)).squeeze(batch + 1)
    tiled.dtype = tiled.dtype.squeeze(tuple(range(batch)))
    return tiled


def _keys(tensor, batch, block_n, block_columns, query_tiles):
    """Every ``(block_n, block_columns)`` tile of a batch (all the
    columns), for each query tile."""
    tiled = tensor.tile((1,) * batch + (block_n, block_columns))
    tiled = tiled.tile((1,) * batch + (-1, -1)).squeeze(batch + 1)
    tiled = tiled.expand((-1,) * batch + (query_tiles,))
    tiled.dtype = tiled.dtype.squeeze(tuple(range(batch)) + (batch + 1,))
    tiled.dtype.dtype = tiled.dtype.dtype.squeeze(tuple(range(batch)))
    return tiled


def arrangement(
    query,
    key,
    value,
    mask,
    row,
    column,
    scale,
    out,
    mask_kind,
    causal,
    wide,
    *,
    block_m,
    block_n,
    block_e,
    block_ev,
):
    batch = query.ndim - 2
    queries = _queries(query, batch, block_m, block_e)
    tiles = queries.shape[batch]
    masks = mask.tile((1,) * batch + (block_m, block_n))
    masks = masks.tile((1,) * batch + (1, -1)).squeeze(batch + 1)
    masks.dtype = masks.dtype.squeeze(tuple(range(batch + 1)))
    masks.dtype.dtype = masks.dtype.dtype.squeeze(tuple(range(batch)))
    rows = row.tile((1,) * batch + (block_m,))
    rows.dtype = rows.dtype.squeeze(tuple(range(batch)))
    columns = column.tile((1,) * batch + (block_n,)).tile((1,) * batch + (-1,))
    columns = columns.expand((-1,) * batch + (tiles,))
    columns.dtype = columns.dtype.squeeze(tuple(range(batch)))
    columns.dtype.dtype = columns.dtype.dtype.squeeze(tuple(range(batch)))
    return (
        queries,
        _keys(key, batch, block_n, block_e, tiles),
        _keys(value, batch, block_n, block_ev, tiles),
        masks,
        rows,
        columns,
        scale,
        _queries(out, batch, block_m, block_ev),
        mask_kind,
        causal,
        wide,
    )


def application(
    query, key, value, mask, row, column, scale, out, mask_kind, causal, wide
):
    q = dot_operand(query, wide)
    i = row
    maximum = ntl.full((query.shape[0],), float("-inf"), dtype=ntl.float32)
    total = ntl.zeros((query.shape[0],), dtype=ntl.float32)
    weighted = ntl.zeros(out.shape, dtype=ntl.float32)
    for index in range(key.shape[0]):
        k = dot_operand(key[index], wide)
        scores = ntl.dot(q, ntl.trans(k), input_precision="ieee") * scale
        j = column[index]
        keep = (j >= 0)[None, :]
        if causal:
            keep = keep & (j[None, :] <= i[:, None])
        if mask_kind == 1:
            keep = keep & (mask[index] != 0)
        if mask_kind == 2:
            scores = scores + upcast(mask[index])
        scores = ntl.where(keep, scores, float("-inf"))
        new = ntl.maximum(maximum, ntl.max(scores, 1))
        shift = ntl.where(new == float("-inf"), 0.0, new)
        weights = ntl.exp(scores - shift[:, None])
        rescale = ntl.exp(maximum - shift)
        total = total * rescale + ntl.sum(weights, 1)
        v = dot_operand(value[index], wide)
        weighted = weighted * rescale[:, None] + ntl.dot(
            weights.to(v.dtype), v, input_precision="ieee"
        )
        maximum = new
    safe = ntl.where(total > 0.0, total, 1.0)
    out = ntl.where(total[:, None] > 0.0, weighted / safe[:, None], 0.0)  # noqa: F841


def specs(batch: int) -> tuple[TensorSpec, ...]:
    ndim = batch + 2
    return (
        TensorSpec("query", ndim, other=0),
        TensorSpec("key", ndim, other=0),
        TensorSpec("value", ndim, other=0),
        TensorSpec("mask", ndim, other=0),
        TensorSpec("row", batch + 1, other=-1),
        TensorSpec("column", batch + 1, other=-1),
        TensorSpec("scale", 0),
        TensorSpec("out", ndim),
        TensorSpec("mask_kind", 0, constexpr=True),
        TensorSpec("causal", 0, constexpr=True),
        TensorSpec("wide", 0, constexpr=True),
    )


def blocks(queries: int, keys: int) -> tuple[int, int]:
    block_m, block_n = INTERPRETER_BLOCKS if INTERPRETER else GPU_BLOCKS
    return (
        min(block_m, max(next_power_of_two(queries), MIN_BLOCK)),
        min(block_n, max(next_power_of_two(keys), MIN_BLOCK)),
    )


def source(batch: int, block_m: int, block_n: int, features: int, value_features):
    """The kernel for `batch` batch dimensions, the row blocks and the
    feature counts (padded to powers of two: a tile takes them whole)."""
    config = {
        "block_m": block_m,
        "block_n": block_n,
        "block_e": max(next_power_of_two(features), MIN_BLOCK),
        "block_ev": max(next_power_of_two(value_features), MIN_BLOCK),
    }
    return kernel_source(
        "scaled_dot_product_attention", arrangement, application, specs(batch), config
    )


def _split_heads(strides, head, sizes, ratio):
    """`strides` with the head dimension `head` split into the three
    dimensions `sizes`: a tensor with `ratio` query heads per head of its
    own sees stride 0 over the last one or two of them."""
    stride = strides[head]
    outer, middle, inner = sizes
    if ratio == 1:
        split = (middle * inner * stride, inner * stride, stride)
    elif ratio == middle * inner:
        split = (stride, 0, 0)
    else:  # ratio == inner
        split = (middle * stride, stride, 0)
    return strides[:head] + split + strides[head + 1 :]


@implementation(operator="scaled_dot_product_attention", devices=("nvidia",), slot=9)
class NineToothedScaledDotProductAttention(ScaledDotProductAttention):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        query, key, value, out = args.query, args.key, args.value, args.out
        mask = args.attn_mask
        if 0 < self.dropout_p < 1:
            raise self.error(
                f"`dropout_p` ({self.dropout_p}) must be 0 at slot 9 (NineToothed): "
                "the dropout mask is drawn from torch's CPU generator; use slot 0 "
                "or 1."
            )
        ratios = sorted({self.key_ratio, self.value_ratio})
        if ratios[-1] % ratios[0]:
            raise self.error(
                f"slot 9 (NineToothed) needs the query heads per key head "
                f"({self.key_ratio}) and per value head ({self.value_ratio}) to "
                "divide one another; use slot 0 or 1."
            )
        self.empty = 0 in out.shape
        # No keys, or everything dropped (`dropout_p` 1 draws nothing).
        self.zeros = not self.empty and (self.S == 0 or self.dropout_p == 1)
        if self.E == 0 and not self.empty and not self.zeros:
            raise self.error(
                "`query` and `key` with no features (E = 0) are not supported at "
                "slot 9 (NineToothed); use slot 0 or 1."
            )
        if self.empty or self.zeros:
            return
        batch = tuple(self.batch_shape)

        def leading(meta, length, columns, ratio=1):
            strides = broadcast_strides(meta.shape[:-2], meta.strides[:-2], batch)
            if ratio > 1:
                # `broadcast_strides` keeps the stride of the smaller head
                # dimension; the split below gives it its meaning.
                strides = strides[:-1] + (meta.strides[-3],)
            tail = (length, columns)
            return (
                strides,
                tail,
                broadcast_strides(meta.shape[-2:], meta.strides[-2:], tail),
            )

        operands = {
            "query": leading(query, self.L, self.E),
            "key": leading(key, self.S, self.E, self.key_ratio),
            "value": leading(value, self.S, self.Ev, self.value_ratio),
            "out": (tuple(out.strides[:-2]), (self.L, self.Ev), out.strides[-2:]),
        }
        if mask is not None:
            operands["mask"] = leading(mask, self.L, self.S)
        ratio_of = {"key": self.key_ratio, "value": self.value_ratio}
        if ratios[-1] > 1:
            head = len(batch) - 1
            inner = ratios[0] if ratios[0] > 1 else ratios[-1]
            middle = ratios[-1] // inner
            sizes = (batch[head] // (middle * inner), middle, inner)
            for name, (strides, tail, tail_strides) in operands.items():
                operands[name] = (
                    _split_heads(strides, head, sizes, ratio_of.get(name, 1)),
                    tail,
                    tail_strides,
                )
            batch = batch[:head] + sizes + batch[head + 1 :]
        names = list(operands)
        merged, merged_strides = coalesce(batch, [operands[name][0] for name in names])
        if not merged:
            merged, merged_strides = (1,), [(0,) for _ in names]
        leading_of = dict(zip(names, merged_strides))
        rank = len(merged)
        block_m, block_n = blocks(self.L, self.S)
        import torch

        self.positions = torch.arange(
            max(self.L, self.S), dtype=torch.int32, device=torch_device(self.device)
        )
        positions = TensorMeta((max(self.L, self.S),), (1,), "int32", self.device)

        def operand(meta, name):
            _, tail, tail_strides = operands[name]
            return tensor_operand(
                meta, merged + tail, leading_of[name] + tuple(tail_strides)
            )

        if mask is None:
            mask_operand = tensor_operand(
                query, merged + (self.L, self.S), (0,) * (rank + 2)
            )
            mask_kind = NO_MASK
        else:
            mask_operand = operand(mask, "mask")
            mask_kind = BOOL_MASK if mask.dtype == "bool" else ADDITIVE_MASK
        self._launch = bind_kernel(
            source(rank, block_m, block_n, self.E, self.Ev),
            {
                "query": operand(query, "query"),
                "key": operand(key, "key"),
                "value": operand(value, "value"),
                "mask": mask_operand,
                "row": tensor_operand(
                    positions, merged + (self.L,), (0,) * rank + (1,)
                ),
                "column": tensor_operand(
                    positions, merged + (self.S,), (0,) * rank + (1,)
                ),
                "scale": float(self.scale),
                "out": operand(out, "out"),
                "mask_kind": mask_kind,
                "causal": self.is_causal,
                "wide": INTERPRETER,
            },
            self.device,
        )
        inputs = (query, key, value) + ((mask,) if mask is not None else ())
        self.overlap = OverlapGuard(out, inputs)
        self.has_mask = mask is not None

    def launch(self, stream, query, key, value, attn_mask, out) -> None:
        if self.empty:
            return
        if self.zeros:
            with stream_context(self.device, stream):
                out.zero_()
            return
        inputs = (query, key, value) + ((attn_mask,) if self.has_mask else ())
        mask = attn_mask if self.has_mask else query
        positions = self.positions
        if self.overlap(out, inputs):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(
                    stream, query, key, value, mask, positions, positions, staging
                )
                out.copy_(staging)
            return
        self._launch(stream, query, key, value, mask, positions, positions, out)
