"""`flash_attn_varlen_func`: FlashAttention-2 forward over packed sequences."""

from __future__ import annotations

from infini.ops.core.operator import Operator

FLASH_ATTENTION_DTYPES = ("float16", "bfloat16", "float32")


class FlashAttnVarlenFunc(Operator):
    """`flash_attn.flash_attn_varlen_func` (forward) into `out`, following
    flash-attn's documented Python behaviour.

    Sequences are packed along dimension 0: `q` is ``(total_q, heads,
    head_dim)``, `k` and `v` are ``(total_k, kv_heads, head_dim[_v])`` and
    sequence `i` spans rows ``cu_seqlens_q[i]:cu_seqlens_q[i + 1]`` of `q`
    (likewise `cu_seqlens_k`, both int32 of ``batch + 1`` entries, starting
    at 0 or above and never decreasing; rows past the last offset are
    neither read nor written). For each sequence and head,
    ``out = softmax(q @ k^T * softmax_scale + bias) @ v``:

    - GQA/MQA: `heads` is a multiple of `kv_heads`; query head `h` reads
      key/value head ``h // (heads / kv_heads)``.
    - `softmax_scale` of `None` means ``1 / sqrt(head_dim)``; `softcap > 0`
      caps the scaled scores to ``softcap * tanh(scores / softcap)`` before
      the bias and the masks (0 or less: no capping).
    - Masks are aligned to the bottom-right corner (query row `i` of a
      sequence of `Lq` queries and `Lk` keys sits at key position
      ``i + Lk - Lq``): `causal` keeps keys up to that position (and makes
      the right window 0); ``window_size = (left, right)`` keeps keys within
      `left` before and `right` after it (negative: unbounded). A row with
      no key left is 0.
    - `alibi_slopes` (float32, ``(heads,)`` or ``(batch, heads)``) adds
      ``-slope * |i + Lk - Lq - j|`` to the score of query `i` and key `j`.
    - Paged KV: with `block_table` (int32, ``(batch, max_blocks)``), `k` and
      `v` are caches ``(num_blocks, block_size, kv_heads, head_dim[_v])``;
      key `j` of sequence `b` is slot ``j % block_size`` of block
      ``block_table[b, j // block_size]``, and the key lengths are the
      differences of `cu_seqlens_k`.
    - `softmax_lse`, when given, receives the float32 log-sum-exp of each
      row's final scores, ``(heads, total_q)``; a row with no visible key
      gets `-inf` (the logarithm of an empty sum; flash-attn's CUDA kernel
      writes `+inf` there).
    - `max_seqlen_q` / `max_seqlen_k` bound the sequence lengths; the CPU
      implementation rejects a longer sequence (flash-attn would compute
      garbage). They are per-call values: a new bound reuses the operator.
    - Inference only: `dropout_p` must be 0. flash-attn returns attention
      probabilities (`S_dmask`) only with dropout, so `s_dmask` must be
      `None`; `return_attn_probs` and `deterministic` change nothing (the
      log-sum-exp goes to `softmax_lse` whenever it is given).
    - float16, bfloat16 (and float32); `q`, `k`, `v` and `out` share the
      dtype. Bad index values raise before anything is written.
    """

    name = "flash_attn_varlen_func"
    trace_name = "FlashAttnVarlenFunc"
    overloads = (
        "q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, "
        "cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int, out: Tensor!",
        "q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, "
        "cu_seqlens_k: Tensor, alibi_slopes: Tensor|None, block_table: Tensor|None, "
        "max_seqlen_q: int, max_seqlen_k: int, dropout_p: float, "
        "softmax_scale: float|None, causal: bool, window_size: list[int], "
        "softcap: float, deterministic: bool, return_attn_probs: bool, "
        "out: Tensor!, softmax_lse: Tensor|None!, s_dmask: Tensor|None!",
    )
    defaults = {
        "alibi_slopes": None,
        "block_table": None,
        "dropout_p": 0.0,
        "softmax_scale": None,
        "causal": False,
        "window_size": (-1, -1),
        "softcap": 0.0,
        "deterministic": False,
        "return_attn_probs": False,
        "softmax_lse": None,
        "s_dmask": None,
    }
    call_scalars = ("max_seqlen_q", "max_seqlen_k")

    def __init__(self, args) -> None:
        super().__init__(args)
        q, k, v, out = args.q, args.k, args.v, args.out
        self.paged = args.block_table is not None
        kv_ndim = 4 if self.paged else 3
        self.require_ndim("q", q, (3,))
        self.require_ndim("out", out, (3,))
        self.require_ndim("k", k, (kv_ndim,))
        self.require_ndim("v", v, (kv_ndim,))
        self.require_dtype("q", q, FLASH_ATTENTION_DTYPES)
        self.require_same_dtype("q", {"q": q, "k": k, "v": v, "out": out})
        heads, head_dim = q.shape[1], q.shape[2]
        kv_heads = k.shape[-2]
        layout = (
            "(num_blocks, block_size, kv_heads, head_dim) with `block_table`"
            if self.paged
            else "(total_k, kv_heads, head_dim)"
        )
        if k.shape[-1] != head_dim:
            raise self.error(
                f"`k` must be {layout} with the head_dim {head_dim} of `q` "
                f"{q.shape}, got {k.shape}."
            )
        if tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
            raise self.error(
                f"`v` must match `k` {k.shape} in every dimension but the last, "
                f"got {v.shape}."
            )
        if kv_heads == 0 or heads % kv_heads:
            raise self.error(
                f"`q` has {heads} heads, which is not a multiple of the {kv_heads} "
                "heads of `k`."
            )
        if self.paged and k.shape[1] == 0:
            raise self.error(f"`k` has block size 0: shape {k.shape}.")
        self.require_shape("out", out, (q.shape[0], heads, v.shape[-1]))
        self.require_writable("out", out)
        for name in ("cu_seqlens_q", "cu_seqlens_k"):
            meta = getattr(args, name)
            self.require_ndim(name, meta, (1,))
            self.require_dtype(name, meta, ("int32",))
        if args.cu_seqlens_q.shape != args.cu_seqlens_k.shape:
            raise self.error(
                f"`cu_seqlens_q` {args.cu_seqlens_q.shape} and `cu_seqlens_k` "
                f"{args.cu_seqlens_k.shape} must both have batch + 1 entries."
            )
        if args.cu_seqlens_q.shape[0] == 0:
            raise self.error("`cu_seqlens_q` must have batch + 1 entries, got 0.")
        batch = args.cu_seqlens_q.shape[0] - 1
        if self.paged:
            table = args.block_table
            self.require_ndim("block_table", table, (2,))
            self.require_dtype("block_table", table, ("int32",))
            if table.shape[0] != batch:
                raise self.error(
                    f"`block_table` must have one row per sequence ({batch}), got "
                    f"shape {table.shape}."
                )
        slopes = args.alibi_slopes
        if slopes is not None:
            self.require_dtype("alibi_slopes", slopes, ("float32",))
            if tuple(slopes.shape) not in ((heads,), (batch, heads)):
                raise self.error(
                    f"`alibi_slopes` must be ({heads},) or ({batch}, {heads}), got "
                    f"{slopes.shape}."
                )
        if args.dropout_p != 0.0:
            raise self.error(
                f"`dropout_p` must be 0 (inference only), got {args.dropout_p}."
            )
        if args.s_dmask is not None:
            raise self.error(
                "`s_dmask` must be None: flash-attn returns attention probabilities "
                "only with dropout, which inference does not use."
            )
        window = tuple(args.window_size)
        if len(window) != 2:
            raise self.error(f"`window_size` must be (left, right), got {window}.")
        if args.softmax_lse is not None:
            self.require_shape("softmax_lse", args.softmax_lse, (heads, q.shape[0]))
            self.require_dtype("softmax_lse", args.softmax_lse, ("float32",))
            self.require_writable("softmax_lse", args.softmax_lse)
        self.scale = (
            head_dim**-0.5 if args.softmax_scale is None else args.softmax_scale
        )
        self.causal = bool(args.causal)
        self.window = window
        self.softcap = args.softcap
        self.groups = heads // kv_heads
        self.batch = batch
        self.bind_call(args.max_seqlen_q, args.max_seqlen_k)

    def bind_call(self, max_seqlen_q: int, max_seqlen_k: int) -> None:
        for name, value in (
            ("max_seqlen_q", max_seqlen_q),
            ("max_seqlen_k", max_seqlen_k),
        ):
            if value < 0:
                raise self.error(f"`{name}` must be 0 or more, got {value}.")
        self.max_seqlen_q = max_seqlen_q
        self.max_seqlen_k = max_seqlen_k
