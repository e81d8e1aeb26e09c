"""Validation shared by the sampling bases."""

from __future__ import annotations

from infini.ops.core.operator import Operator

LOGITS_DTYPES = ("float32", "float16", "bfloat16")
TOKEN_DTYPES = ("int32", "int64")
TOP_K_DTYPES = ("int32", "int64")
TOP_P_DTYPES = ("float32", "float64")

_MASK64 = (1 << 64) - 1


def seed_bits(value: int) -> int:
    """A seed or offset (a Python int of any sign and size) taken modulo
    2**64: the unsigned value the kernels' counter-based generator hashes."""
    return int(value) & _MASK64


def check_logits(operator: Operator, name: str, meta) -> tuple[int, int]:
    """`name` is ``(batch, vocab)`` float logits with ``vocab >= 1``."""
    operator.require_dtype(name, meta, LOGITS_DTYPES)
    operator.require_ndim(name, meta, (2,))
    batch, vocab = meta.shape
    if vocab < 1:
        raise operator.error(f"`{name}` must have a vocabulary of at least 1 token.")
    return batch, vocab


def check_per_row(
    operator: Operator, name: str, meta, rows: int, dtypes, optional: bool = True
) -> None:
    """A per-row parameter tensor: ``(rows,)`` or ``(1,)`` (one value for
    every row)."""
    if meta is None:
        if not optional:
            raise operator.error(f"`{name}` must be a tensor, got None.")
        return
    operator.require_dtype(name, meta, dtypes)
    if meta.ndim != 1 or meta.shape[0] not in (rows, 1):
        raise operator.error(
            f"`{name}` must have shape ({rows},) (one value per row) or (1,), "
            f"got {meta.shape}."
        )


def check_tokens_out(operator: Operator, name: str, meta, rows: int) -> None:
    operator.require_dtype(name, meta, TOKEN_DTYPES)
    operator.require_shape(name, meta, (rows,), "(one token per row)")
    operator.require_writable(name, meta)


class TopKTopPSampling(Operator):
    """Validation of the top-k / top-p samplers: ``(logits, k, p, ...,
    out)`` with optional per-row `k` and `p` (subclasses name them)."""

    k_name = "k"
    p_name = "p"
    host_tensors = ("k", "p")
    optional_filters = True

    def __init__(self, args) -> None:
        super().__init__(args)
        self.batch, self.vocab = check_logits(self, "logits", args.logits)
        indices = getattr(args, "indices", None)
        rows = self.batch
        if indices is not None:
            self.require_dtype("indices", indices, TOKEN_DTYPES)
            self.require_ndim("indices", indices, (1,))
            rows = indices.shape[0]
        self.rows = rows
        check_per_row(
            self,
            self.k_name,
            getattr(args, self.k_name),
            rows,
            TOP_K_DTYPES,
            self.optional_filters,
        )
        check_per_row(
            self,
            self.p_name,
            getattr(args, self.p_name),
            rows,
            TOP_P_DTYPES,
            self.optional_filters,
        )
        check_tokens_out(self, "out", args.out, rows)
