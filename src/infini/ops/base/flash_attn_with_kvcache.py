"""`flash_attn_with_kvcache`: FlashAttention-2 decoding against a KV cache."""

from __future__ import annotations

from infini.ops.core.operator import Operator

FLASH_ATTENTION_DTYPES = ("float16", "bfloat16", "float32")


class FlashAttnWithKvcache(Operator):
    """`flash_attn.flash_attn_with_kvcache` into `out` (and `softmax_lse`),
    following flash-attn's documented Python behaviour.

    - `q` is ``(batch, seqlen_q, heads, head_dim)``; `out` is ``(batch,
      seqlen_q, heads, head_dim_v)``. `k_cache` and `v_cache` are
      ``(batch_cache, capacity, kv_heads, head_dim[_v])``, or with
      `block_table` (int32, ``(batch, max_blocks)``) paged caches
      ``(num_blocks, block_size, kv_heads, head_dim[_v])`` where position `j`
      of sequence `b` is slot ``j % block_size`` of block
      ``block_table[b, j // block_size]`` (capacity ``max_blocks *
      block_size``).
    - `cache_seqlens` (an int for every sequence, or int32 ``(batch,)``) is
      the number of cached tokens; `None` means the whole capacity. Sequence
      `b` reads cache entry ``cache_batch_idx[b]`` (int32 ``(batch,)``;
      default `b`; dense caches only); its keys start at ``cache_leftpad[b]``
      (int32 ``(batch,)``, at most the cached length; default 0).
    - With `k` and `v` (``(batch, seqlen_new, kv_heads, head_dim[_v])``) the
      new tokens are first written into the caches at positions
      ``cache_seqlens[b] ..`` (which needs `cache_seqlens`, and room), then
      attended to: the sequence has ``cache_seqlens[b] + seqlen_new`` keys.
      With duplicate `cache_batch_idx` entries, which sequence's tokens land
      in the cache is unspecified, as in flash-attn.
    - Rotary embedding (`rotary_cos`, `rotary_sin`: ``(rows, rotary_dim /
      2)``, the dtype of `q`; only with `k`): new key `t` is rotated at
      position ``cache_seqlens[b] + t`` before it is stored; query `t` at
      ``cache_seqlens[b] + t`` when `causal` or windowed, else every query at
      ``cache_seqlens[b]``. The first `rotary_dim` features rotate:
      `rotary_interleaved` pairs ``(2i, 2i + 1)``, else ``(i, i +
      rotary_dim / 2)`` (GPT-NeoX). Positions count from the start of the
      cache row (left padding included).
    - Attention as in `flash_attn_varlen_func`: GQA, `softmax_scale` (`None`:
      ``1 / sqrt(head_dim)``), `softcap`, masks aligned to the bottom-right
      corner (`causal`, ``window_size = (left, right)``, negative:
      unbounded), `alibi_slopes` (float32, ``(heads,)`` or ``(batch,
      heads)``) adding ``-slope * |distance|``; a query with no visible key
      gives 0.
    - `softmax_lse`, when given (float32, ``(batch, heads, seqlen_q)``),
      receives each row's log-sum-exp (`-inf` for a row with no visible
      key); `return_softmax_lse` asks for it and then requires the tensor.
      `num_splits` is a GPU scheduling hint and changes nothing.
    - Index values (`cache_seqlens`, `cache_batch_idx`, `cache_leftpad`,
      `block_table`, rotary rows) are checked before anything is written.
      An integer `cache_seqlens` is per-call data: a new value reuses the
      operator.
    """

    name = "flash_attn_with_kvcache"
    trace_name = "FlashAttnWithKvcache"
    overloads = (
        "q: Tensor, k_cache: Tensor!, v_cache: Tensor!, out: Tensor!",
        "q: Tensor, k_cache: Tensor!, v_cache: Tensor!, k: Tensor|None, "
        "v: Tensor|None, rotary_cos: Tensor|None, rotary_sin: Tensor|None, "
        "cache_seqlens: int, cache_batch_idx: Tensor|None, "
        "cache_leftpad: Tensor|None, block_table: Tensor|None, "
        "alibi_slopes: Tensor|None, softmax_scale: float|None, causal: bool, "
        "window_size: list[int], softcap: float, rotary_interleaved: bool, "
        "num_splits: int, return_softmax_lse: bool, out: Tensor!, "
        "softmax_lse: Tensor|None!",
        "q: Tensor, k_cache: Tensor!, v_cache: Tensor!, k: Tensor|None, "
        "v: Tensor|None, rotary_cos: Tensor|None, rotary_sin: Tensor|None, "
        "cache_seqlens: Tensor|None, cache_batch_idx: Tensor|None, "
        "cache_leftpad: Tensor|None, block_table: Tensor|None, "
        "alibi_slopes: Tensor|None, softmax_scale: float|None, causal: bool, "
        "window_size: list[int], softcap: float, rotary_interleaved: bool, "
        "num_splits: int, return_softmax_lse: bool, out: Tensor!, "
        "softmax_lse: Tensor|None!",
    )
    defaults = {
        "k": None,
        "v": None,
        "rotary_cos": None,
        "rotary_sin": None,
        "cache_seqlens": None,
        "cache_batch_idx": None,
        "cache_leftpad": None,
        "block_table": None,
        "alibi_slopes": None,
        "softmax_scale": None,
        "causal": False,
        "window_size": (-1, -1),
        "softcap": 0.0,
        "rotary_interleaved": True,
        "num_splits": 0,
        "return_softmax_lse": False,
        "softmax_lse": None,
    }
    # An integer `cache_seqlens` grows on every decoding step.
    call_scalars = ("cache_seqlens",)

    def __init__(self, args) -> None:
        super().__init__(args)
        q, k_cache, v_cache, out = args.q, args.k_cache, args.v_cache, args.out
        k, v = args.k, args.v
        self.paged = args.block_table is not None
        self.require_ndim("q", q, (4,))
        self.require_ndim("k_cache", k_cache, (4,))
        self.require_ndim("v_cache", v_cache, (4,))
        self.require_ndim("out", out, (4,))
        self.require_dtype("q", q, FLASH_ATTENTION_DTYPES)
        metas = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "out": out}
        if k is not None:
            metas["k"] = k
        if v is not None:
            metas["v"] = v
        self.require_same_dtype("q", metas)
        batch, seqlen_q, heads, head_dim = q.shape
        entries, rows, kv_heads, cache_dim = k_cache.shape
        layout = (
            "(num_blocks, block_size, kv_heads, head_dim) with `block_table`"
            if self.paged
            else "(batch_cache, capacity, kv_heads, head_dim)"
        )
        if cache_dim != head_dim:
            raise self.error(
                f"`k_cache` must be {layout} with the head_dim {head_dim} of `q` "
                f"{q.shape}, got {k_cache.shape}."
            )
        if tuple(v_cache.shape[:-1]) != tuple(k_cache.shape[:-1]):
            raise self.error(
                f"`v_cache` must match `k_cache` {k_cache.shape} in every "
                f"dimension but the last, got {v_cache.shape}."
            )
        value_dim = v_cache.shape[-1]
        if kv_heads == 0 or heads % kv_heads:
            raise self.error(
                f"`q` has {heads} heads, which is not a multiple of the {kv_heads} "
                "heads of `k_cache`."
            )
        self.require_shape("out", out, (batch, seqlen_q, heads, value_dim))
        self.require_writable("out", out)
        if self.paged:
            table = args.block_table
            self.require_ndim("block_table", table, (2,))
            self.require_dtype("block_table", table, ("int32",))
            if table.shape[0] != batch:
                raise self.error(
                    f"`block_table` must have one row per sequence ({batch}), got "
                    f"shape {table.shape}."
                )
            if rows == 0:
                raise self.error(f"`k_cache` has block size 0: shape {k_cache.shape}.")
            if args.cache_batch_idx is not None:
                raise self.error(
                    "`cache_batch_idx` selects rows of a dense cache; with "
                    "`block_table` pass None."
                )
            self.capacity = table.shape[1] * rows
        else:
            self.capacity = rows
            if args.cache_batch_idx is None and entries < batch:
                raise self.error(
                    f"`k_cache` has {entries} cache entries for the {batch} "
                    "sequences of `q`; pass `cache_batch_idx` or a larger cache."
                )
        for name in ("cache_batch_idx", "cache_leftpad"):
            meta = getattr(args, name)
            if meta is not None:
                self.require_dtype(name, meta, ("int32",))
                self.require_shape(name, meta, (batch,), "(one per sequence)")
        seqlens = args.cache_seqlens
        self.seqlens_tensor = seqlens is not None and not isinstance(seqlens, int)
        if self.seqlens_tensor:
            self.require_dtype("cache_seqlens", seqlens, ("int32",))
            self.require_shape("cache_seqlens", seqlens, (batch,), "(one per sequence)")
        if (k is None) != (v is None):
            raise self.error("`k` and `v` must be given together (or neither).")
        self.new = 0
        if k is not None:
            self.require_ndim("k", k, (4,))
            self.require_shape("k", k, (batch, k.shape[1], kv_heads, head_dim))
            self.require_shape("v", v, (batch, k.shape[1], kv_heads, value_dim))
            if seqlens is None:
                raise self.error(
                    "`cache_seqlens` is required with `k` and `v`: it says where "
                    "the new tokens go."
                )
            self.require_writable("k_cache", k_cache)
            self.require_writable("v_cache", v_cache)
            self.new = k.shape[1]
        cos, sin = args.rotary_cos, args.rotary_sin
        self.rotary_half = 0
        if (cos is None) != (sin is None):
            raise self.error(
                "`rotary_cos` and `rotary_sin` must be given together (or neither)."
            )
        if cos is not None:
            if k is None:
                raise self.error(
                    "rotary embedding (`rotary_cos`, `rotary_sin`) needs the new "
                    "`k` and `v` to rotate and append."
                )
            self.require_ndim("rotary_cos", cos, (2,))
            self.require_same_dtype("q", {"q": q, "rotary_cos": cos, "rotary_sin": sin})
            self.require_shape("rotary_sin", sin, cos.shape, "(that of `rotary_cos`)")
            if cos.shape[1] == 0 or 2 * cos.shape[1] > head_dim:
                raise self.error(
                    f"`rotary_cos` {cos.shape} must have between 1 and head_dim / 2 "
                    f"= {head_dim // 2} columns."
                )
            self.rotary_half = cos.shape[1]
        slopes = args.alibi_slopes
        if slopes is not None:
            self.require_dtype("alibi_slopes", slopes, ("float32",))
            if tuple(slopes.shape) not in ((heads,), (batch, heads)):
                raise self.error(
                    f"`alibi_slopes` must be ({heads},) or ({batch}, {heads}), got "
                    f"{slopes.shape}."
                )
        window = tuple(args.window_size)
        if len(window) != 2:
            raise self.error(f"`window_size` must be (left, right), got {window}.")
        if args.num_splits < 0:
            raise self.error(f"`num_splits` must be 0 or more, got {args.num_splits}.")
        lse = args.softmax_lse
        if args.return_softmax_lse and lse is None:
            raise self.error(
                "`return_softmax_lse` is set but `softmax_lse` is None; pass the "
                "tensor to write."
            )
        if lse is not None:
            self.require_shape("softmax_lse", lse, (batch, heads, seqlen_q))
            self.require_dtype("softmax_lse", lse, ("float32",))
            self.require_writable("softmax_lse", lse)
        self.scale = (
            head_dim**-0.5 if args.softmax_scale is None else args.softmax_scale
        )
        self.causal = bool(args.causal)
        self.window = window
        self.softcap = args.softcap
        self.batch = batch
        self.cache_length = None
        self.bind_call(seqlens)

    def bind_call(self, cache_seqlens) -> None:
        """Takes an integer `cache_seqlens` (a tensor or `None` is read at
        launch)."""
        if cache_seqlens is None or not isinstance(cache_seqlens, int):
            return
        if cache_seqlens < 0 or cache_seqlens + self.new > self.capacity:
            raise self.error(
                f"`cache_seqlens` is {cache_seqlens}, out of the range "
                f"[0, {self.capacity - self.new}] that the cache (capacity "
                f"{self.capacity}) and the {self.new} appended tokens leave."
            )
        self.cache_length = cache_seqlens
