"""Validation shared by the MoE routing bases (`topk_softmax`,
`topk_sigmoid`, `topksoftmax_infinilm`, `grouped_topk`)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

SCORE_DTYPES = ("float32", "float16", "bfloat16")
ROUTING_INDEX_DTYPES = ("int32", "int64", "uint32")
PADDING_DTYPES = ("bool", "int8", "uint8", "int32", "int64")


def check_scores(operator: Operator, name: str, meta) -> tuple[int, int]:
    """`name` is a 2-D ``(tokens, experts)`` float tensor; returns its shape."""
    operator.require_dtype(name, meta, SCORE_DTYPES)
    operator.require_ndim(name, meta, (2,))
    return meta.shape


def check_topk_outputs(
    operator: Operator,
    tokens: int,
    outputs: dict,
    dtypes: dict,
) -> int:
    """Every output in `outputs` (name -> meta) is a writable 2-D
    ``(tokens, topk)`` tensor of one of `dtypes[name]`, with one `topk`;
    returns `topk`."""
    first_name, first = next(iter(outputs.items()))
    operator.require_ndim(first_name, first, (2,))
    if first.shape[0] != tokens:
        raise operator.error(
            f"`{first_name}` must have shape (tokens, topk) with tokens = {tokens}, "
            f"got {first.shape}."
        )
    topk = first.shape[1]
    for name, meta in outputs.items():
        operator.require_dtype(name, meta, dtypes[name])
        operator.require_shape(
            name, meta, (tokens, topk), f"(tokens, topk) like `{first_name}`"
        )
        operator.require_writable(name, meta)
    return topk


def check_expert_vector(operator: Operator, name: str, meta, experts: int) -> None:
    """An optional per-expert float vector ``(experts,)``."""
    if meta is None:
        return
    operator.require_dtype(name, meta, SCORE_DTYPES)
    operator.require_shape(name, meta, (experts,), "(one value per expert)")
