"""`scaled_dot_product_attention`: ``softmax(q @ k^T * scale + mask) @ v``."""

from __future__ import annotations

import math

from infini.ops.core.operator import Operator

ATTENTION_DTYPES = ("float32", "float16", "bfloat16")


class ScaledDotProductAttention(Operator):
    """`torch.nn.functional.scaled_dot_product_attention` into `out`.

    ``out = dropout(softmax(query @ key^T * scale + mask)) @ value``, with
    `query` ``(..., L, E)``, `key` ``(..., S, E)``, `value` ``(..., S, Ev)``
    and `out` ``(..., L, Ev)``:

    - The leading (batch) dimensions broadcast as in `torch.matmul` (a size-1
      dimension is shared), and `out` has their broadcast shape. All three
      inputs have at least 2 dimensions.
    - `enable_gqa`: with 3 or more dimensions, `key` and `value` may have
      fewer heads (dimension -3) than `query`, dividing them: query head `h`
      reads key/value head ``h // (query heads / key heads)``, as torch's
      `repeat_interleave` does.
    - `scale` of `None` means ``1 / sqrt(E)``.
    - `attn_mask` broadcasts to ``(batch of query and key..., L, S)``: a bool
      mask keeps the elements that are `True`, a float mask (float32 or the
      dtype of `query`) is added to the scores. `is_causal` keeps ``j <= i``
      (top-left aligned) and cannot be combined with `attn_mask`.
    - A row with no element left (all masked) is 0, as torch computes it.
    - `dropout_p` in [0, 1]: when positive, the attention weights are
      multiplied by a mask drawn from torch's default CPU generator exactly
      as torch's math path draws it - ``torch.empty(attn_shape,
      dtype=float32).bernoulli_(1 - dropout_p)`` divided by
      ``1 - dropout_p``, where `attn_shape` is the broadcast batch of `query`
      and `key` plus ``(L, S)`` - so a call after `torch.manual_seed(s)`
      equals `F.scaled_dot_product_attention` after the same seed, and
      consumes the generator the same way. ``dropout_p == 1`` draws nothing
      and gives zeros (as `torch.dropout`).
    - float32, float16 and bfloat16; `query`, `key`, `value` and `out` share
      the dtype. Computed in float32 (online softmax), rounded once. Any
      strides; zero-size batches and sequences (an empty key sequence gives
      zeros). `out` may overlap the inputs: they are read first.
    """

    name = "scaled_dot_product_attention"
    trace_name = "ScaledDotProductAttention"
    overloads = (
        "query: Tensor, key: Tensor, value: Tensor, out: Tensor!",
        "query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor|None = None, "
        "dropout_p: float = 0.0, is_causal: bool = false, scale: float|None = None, "
        "enable_gqa: bool = false, out: Tensor!",
    )
    defaults = {
        "attn_mask": None,
        "dropout_p": 0.0,
        "is_causal": False,
        "scale": None,
        "enable_gqa": False,
    }

    def __init__(self, args) -> None:
        super().__init__(args)
        query, key, value, out = args.query, args.key, args.value, args.out
        mask = args.attn_mask
        self.require_dtype("query", query, ATTENTION_DTYPES)
        self.require_same_dtype(
            "query", {"query": query, "key": key, "value": value, "out": out}
        )
        for name, meta in (("query", query), ("key", key), ("value", value)):
            if meta.ndim < 2:
                raise self.error(
                    f"`{name}` must have at least 2 dimensions (..., sequence, "
                    f"features), got shape {meta.shape}."
                )
        self.L, self.E = query.shape[-2:]
        self.S, key_features = key.shape[-2:]
        value_length, self.Ev = value.shape[-2:]
        if key_features != self.E:
            raise self.error(
                f"`key` must have {self.E} features (the last dimension of `query`), "
                f"got shape {key.shape}."
            )
        if value_length != self.S:
            raise self.error(
                f"`value` must have {self.S} positions (dimension -2 of `key`), got "
                f"shape {value.shape}."
            )
        # GQA: key/value heads are repeated to the query heads.
        self.key_ratio = self.value_ratio = 1
        if args.enable_gqa and query.ndim >= 3:
            heads = query.shape[-3]
            for name, meta in (("key", key), ("value", value)):
                if meta.ndim < 3 or heads % meta.shape[-3] != 0:
                    found = meta.shape[-3] if meta.ndim >= 3 else "no"
                    raise self.error(
                        f"with `enable_gqa`, the heads of `{name}` (dimension -3, "
                        f"{found}) must divide the {heads} heads of `query`."
                    )
            self.key_ratio = heads // key.shape[-3]
            self.value_ratio = heads // value.shape[-3]
        key_batch = _repeat_heads(key.shape[:-2], self.key_ratio)
        value_batch = _repeat_heads(value.shape[:-2], self.value_ratio)
        attn_batch = _broadcast(query.shape[:-2], key_batch)
        batch = None if attn_batch is None else _broadcast(attn_batch, value_batch)
        if batch is None:
            raise self.error(
                f"the batch dimensions of `query` {query.shape}, `key` {key.shape} "
                f"and `value` {value.shape} do not broadcast"
                + ("" if args.enable_gqa else " (pass `enable_gqa=True` for GQA)")
                + "."
            )
        self.batch_shape = batch
        self.attn_shape = attn_batch + (self.L, self.S)
        expected = batch + (self.L, self.Ev)
        self.require_shape("out", out, expected, "(batch..., L, value features)")
        self.require_writable("out", out)
        if mask is not None:
            if mask.dtype not in ("bool", "float32", query.dtype):
                raise self.error(
                    f"`attn_mask` must be bool, float32 or {query.dtype} (the dtype "
                    f"of `query`), got {mask.dtype}."
                )
            if (
                mask.ndim < 2
                or mask.ndim > len(self.attn_shape)
                or _broadcast(mask.shape, self.attn_shape) != self.attn_shape
            ):
                raise self.error(
                    f"`attn_mask` of shape {mask.shape} does not broadcast to the "
                    f"attention shape {self.attn_shape} (batch..., L, S)."
                )
            if args.is_causal:
                raise self.error(
                    "`attn_mask` must be None when `is_causal` is True (as in torch)."
                )
        dropout = args.dropout_p
        if not 0.0 <= dropout <= 1.0:
            raise self.error(f"`dropout_p` must lie in [0, 1], got {dropout}.")
        self.dropout_p = dropout
        self.is_causal = bool(args.is_causal)
        if args.scale is None:
            self.scale = 1.0 / math.sqrt(self.E) if self.E else 1.0
        else:
            self.scale = float(args.scale)


def _repeat_heads(shape: tuple, ratio: int) -> tuple:
    if ratio == 1:
        return tuple(shape)
    return tuple(shape[:-1]) + (shape[-1] * ratio,)


def _broadcast(a: tuple, b: tuple) -> tuple | None:
    ndim = max(len(a), len(b))
    a = (1,) * (ndim - len(a)) + tuple(a)
    b = (1,) * (ndim - len(b)) + tuple(b)
    result = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            return None
        result.append(y if x == 1 else x)
    return tuple(result)
