"""`rotary_embedding_infinilm`: InfiniLM RoPE with separate sine and cosine
tables, into `out`."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._indexing import INDEX_DTYPES, VALUE_DTYPES, check_index_range


class RotaryEmbeddingInfinilm(Operator):
    """RoPE over whole heads: ``out = rotate(input, pos_ids)``.

    - `input` and `out` are ``(seq, heads, head)`` or
      ``(batch, seq, heads, head)`` with an even `head`; any strides.
    - `pos_ids` is ``(seq,)`` for 3-D input; for 4-D input it is
      ``(batch, seq)``, or ``(seq,)`` shared by every batch entry. int32 or
      int64, each in ``[0, max_pos)``.
    - `sin_table` and `cos_table` are ``(max_pos, head / 2)``, one dtype.
    - With ``half = head / 2`` and ``c, s = cos_table[p, i], sin_table[p, i]``
      a pair ``(x, y)`` becomes ``(x*c - y*s, y*c + x*s)``. Pair ``i`` is
      ``(x[i], x[i + half])`` (half-split) when `is_neox` is False and
      ``(x[2i], x[2i + 1])`` (interleaved) when it is True: the reverse of
      vLLM's naming, as in the original.
    - float32, float16 and bfloat16; `input` and `out` share a dtype, the
      tables may have any of the three. Computed in float32, rounded once.
    - `out` may be `input` (in place) or overlap it: inputs are read first.
    """

    name = "rotary_embedding_infinilm"
    trace_name = "RotaryEmbeddingInfinilm"
    overloads = (
        "input: Tensor, pos_ids: Tensor, sin_table: Tensor, cos_table: Tensor, "
        "is_neox: bool, out: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        input, pos_ids, out = args.input, args.pos_ids, args.out
        sin_table, cos_table = args.sin_table, args.cos_table
        self.require_dtype("input", input, VALUE_DTYPES)
        self.require_same_dtype("input", {"input": input, "out": out})
        self.require_dtype("pos_ids", pos_ids, INDEX_DTYPES)
        self.require_dtype("sin_table", sin_table, VALUE_DTYPES)
        self.require_same_dtype(
            "sin_table", {"sin_table": sin_table, "cos_table": cos_table}
        )
        self.require_ndim("input", input, (3, 4))
        self.require_shape("out", out, input.shape, "(the shape of `input`)")
        self.require_writable("out", out)
        head = input.shape[-1]
        if head % 2:
            raise self.error(
                f"the head dimension of `input` must be even, got shape {input.shape}."
            )
        self.require_ndim("sin_table", sin_table, (2,))
        self.max_position = sin_table.shape[0]
        self.require_shape(
            "sin_table",
            sin_table,
            (self.max_position, head // 2),
            "(positions, half the head dimension of `input`)",
        )
        self.require_shape(
            "cos_table", cos_table, sin_table.shape, "(the shape of `sin_table`)"
        )
        tokens = input.shape[:-2]
        # Whether one row of positions serves every batch entry.
        self.shared_positions = input.ndim == 4 and pos_ids.shape == tokens[1:]
        if pos_ids.shape != tokens and not self.shared_positions:
            allowed = f"{tokens}" + (f" or {tokens[1:]}" if input.ndim == 4 else "")
            raise self.error(
                f"`pos_ids` must have shape {allowed} for `input` of shape "
                f"{input.shape}, got {pos_ids.shape}."
            )

    def check_positions(self, pos_ids) -> None:
        """Raises unless every position indexes a row of the tables (for
        implementations that do not check inside their kernel)."""
        check_index_range(
            self, "pos_ids", pos_ids, 0, self.max_position, "the rows of the tables"
        )
