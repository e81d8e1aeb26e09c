"""`flash_attention`: fused multi-head / grouped-query attention, packed or
paged (InfiniOps' `FlashAttention`)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

FLASH_ATTENTION_DTYPES = ("float16", "bfloat16", "float32")
CUMULATIVE_DTYPES = ("int32", "int64")


class FlashAttention(Operator):
    """Attention over ``(tokens, heads, head_size)`` (TND) tensors into
    `output`, ``softmax(query key^T * scale, masks) value`` per sequence and
    head.

    The original's base (`src/base/flash_attention.h`) fixes only the
    parameters and the TND layout of `query`; it has no implementation at
    the pinned commit. This interpretation follows its later CUDA and Ascend
    backends and flash-attn's masks:

    - `num_heads`, `num_kv_heads` and `head_size` restate the shapes and must
      match them; `num_heads` is a multiple of `num_kv_heads` (query head `h`
      reads kv head ``h // (num_heads / num_kv_heads)``).
    - Without `block_table`, `key` and `value` are ``(kv_tokens,
      num_kv_heads, head_size)``. With `cu_seqlens_q` (``batch + 1``
      cumulative offsets, int32 or int64) sequence `i` is query rows
      ``cu_seqlens_q[i]:cu_seqlens_q[i + 1]`` and key rows likewise from
      `cu_seqlens_kv` (the same offsets as the queries when `None`);
      without either, `query` is one sequence over all of `key`.
      `cu_seqlens_kv` without `cu_seqlens_q` is rejected.
    - With `block_table` (int32, ``(batch, max_blocks)``), `key` and `value`
      are paged caches ``(num_blocks, block_size, num_kv_heads, head_size)``
      (`block_size` must equal ``key.shape[1]``; otherwise it is unused):
      key `j` of sequence `b` is slot ``j % block_size`` of block
      ``block_table[b, j // block_size]``, and `cu_seqlens_kv` (required)
      gives the key counts as differences. The queries are split by
      `cu_seqlens_q`, or, when it is `None`, are one token per sequence
      (decoding: ``tokens == batch``).
    - Masks are aligned to the bottom-right corner: query `i` of a sequence
      of `Lq` queries and `Lk` keys sits at key position ``i + Lk - Lq``.
      `causal` hides keys after it; `window_left` / `window_right` (negative:
      unbounded) keep keys at most that many positions before / after it
      (`causal` makes the right window 0). A query with no key left gets 0.
    - `scale` multiplies the scores as given. float32, float16, bfloat16;
      `query`, `key`, `value` and `output` share the dtype. Offsets and
      block indices are checked before anything is written.
    """

    name = "flash_attention"
    trace_name = "FlashAttention"
    overloads = (
        "query: Tensor, key: Tensor, value: Tensor, cu_seqlens_q: Tensor|None, "
        "cu_seqlens_kv: Tensor|None, block_table: Tensor|None, num_heads: int, "
        "num_kv_heads: int, head_size: int, scale: float, causal: bool, "
        "window_left: int, window_right: int, block_size: int, output: Tensor!",
    )
    defaults = {"cu_seqlens_q": None, "cu_seqlens_kv": None, "block_table": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        query, key, value, output = args.query, args.key, args.value, args.output
        heads, kv_heads, head_size = args.num_heads, args.num_kv_heads, args.head_size
        self.paged = args.block_table is not None
        self.require_ndim("query", query, (3,))
        self.require_dtype("query", query, FLASH_ATTENTION_DTYPES)
        self.require_same_dtype(
            "query", {"query": query, "key": key, "value": value, "output": output}
        )
        if kv_heads <= 0 or heads <= 0 or heads % kv_heads:
            raise self.error(
                f"`num_heads` ({heads}) must be a positive multiple of "
                f"`num_kv_heads` ({kv_heads})."
            )
        self.require_shape(
            "query", query, (query.shape[0], heads, head_size),
            "(tokens, `num_heads`, `head_size`)",
        )  # fmt: skip
        self.require_shape("output", output, query.shape, "(the shape of `query`)")
        self.require_writable("output", output)
        cu_q, cu_kv = args.cu_seqlens_q, args.cu_seqlens_kv
        for name, meta in (("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_kv)):
            if meta is not None:
                self.require_ndim(name, meta, (1,))
                self.require_dtype(name, meta, CUMULATIVE_DTYPES)
                if meta.shape[0] == 0:
                    raise self.error(f"`{name}` must have batch + 1 entries, got 0.")
        if cu_q is not None and cu_kv is not None:
            if cu_q.shape != cu_kv.shape:
                raise self.error(
                    f"`cu_seqlens_q` {cu_q.shape} and `cu_seqlens_kv` {cu_kv.shape} "
                    "must both have batch + 1 entries."
                )
            self.require_same_dtype(
                "cu_seqlens_q", {"cu_seqlens_q": cu_q, "cu_seqlens_kv": cu_kv}
            )
        if self.paged:
            table = args.block_table
            self.require_ndim("block_table", table, (2,))
            self.require_dtype("block_table", table, ("int32",))
            batch = table.shape[0]
            self.require_ndim("key", key, (4,))
            if key.shape[1] != args.block_size or args.block_size <= 0:
                raise self.error(
                    f"`block_size` is {args.block_size} but `key` {key.shape} has "
                    f"blocks of {key.shape[1]} tokens."
                )
            expected = (key.shape[0], args.block_size, kv_heads, head_size)
            why = "(num_blocks, `block_size`, `num_kv_heads`, `head_size`)"
            if cu_kv is None:
                raise self.error(
                    "`cu_seqlens_kv` is required with `block_table`: its differences "
                    "are the sequences' key counts."
                )
            if cu_kv.shape[0] != batch + 1:
                raise self.error(
                    f"`cu_seqlens_kv` must have {batch + 1} entries (one more than "
                    f"the rows of `block_table`), got {cu_kv.shape[0]}."
                )
            if cu_q is None and query.shape[0] != batch:
                raise self.error(
                    f"without `cu_seqlens_q`, `query` holds one token per sequence: "
                    f"{batch} rows, got {query.shape[0]}."
                )
        else:
            self.require_ndim("key", key, (3,))
            expected = (key.shape[0], kv_heads, head_size)
            why = "(kv_tokens, `num_kv_heads`, `head_size`)"
            if cu_kv is not None and cu_q is None:
                raise self.error(
                    "`cu_seqlens_kv` without `cu_seqlens_q` is ambiguous; pass both "
                    "(or `cu_seqlens_q` alone for keys packed like the queries)."
                )
        self.require_shape("key", key, expected, why)
        self.require_shape("value", value, expected, "(the shape of `key`)")
        self.scale = float(args.scale)
        self.causal = bool(args.causal)
        self.window_left = args.window_left if args.window_left >= 0 else -1
        self.window_right = args.window_right if args.window_right >= 0 else -1
        if self.causal:
            self.window_right = 0
