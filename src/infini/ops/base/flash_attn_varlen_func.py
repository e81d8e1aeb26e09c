"""`flash_attn_varlen_func`: FlashAttention-2 forward over packed sequences."""

from __future__ import annotations

from infini.ops.core.operator import Operator

FLASH_ATTENTION_DTYPES = ("float16", "bfloat16", "float32")


class FlashAttnVarlenFunc(Operator):
    """`flash_attn.flash_attn_varlen_func` (forward) into `out`.

    Sequences are packed along dimension 0: `q` is ``(total_q, heads,
    head_dim)``, `k` and `v` are ``(total_k, kv_heads, head_dim[_v])`` and
    sequence `i` spans rows ``cu_seqlens_q[i]:cu_seqlens_q[i + 1]`` of `q`
    (likewise `cu_seqlens_k`, both int32 of ``batch + 1`` entries). For each
    sequence and head, ``out = softmax(q @ k^T * softmax_scale) @ v``:

    - GQA: `heads` is a multiple of `kv_heads`; query head `h` reads key/value
      head ``h // (heads / kv_heads)``.
    - `softmax_scale` of `None` means ``1 / sqrt(head_dim)``; `softcap > 0`
      caps the scores to ``softcap * tanh(scores / softcap)``.
    - Masks are aligned to the bottom-right corner (query row `i` of a
      sequence of `Lq` queries and `Lk` keys sits at key position
      ``i + Lk - Lq``): `causal` keeps keys up to that position;
      ``window_size = (left, right)`` keeps keys within `left` before and
      `right` after it (-1: unbounded). A row with no key left is 0.
    - `softmax_lse`, when given, receives the float32 log-sum-exp of the
      scaled scores, ``(heads, total_q)``; `s_dmask` is not written.
    - Inference only: `dropout_p` must be 0. `alibi_slopes` and `block_table`
      are served by the linked flash-attn provider only and must be `None`.
    - float16, bfloat16 (and float32); `q`, `k`, `v` and `out` share the
      dtype. `max_seqlen_q` / `max_seqlen_k` bound the sequence lengths.
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

    def __init__(self, args) -> None:
        super().__init__(args)
        q, k, v, out = args.q, args.k, args.v, args.out
        for name, meta in (("q", q), ("k", k), ("v", v), ("out", out)):
            self.require_ndim(name, meta, (3,))
        self.require_dtype("q", q, FLASH_ATTENTION_DTYPES)
        self.require_same_dtype("q", {"q": q, "k": k, "v": v, "out": out})
        heads, head_dim = q.shape[1], q.shape[2]
        kv_heads = k.shape[1]
        if k.shape[2] != head_dim:
            raise self.error(
                f"`k` must have head_dim {head_dim} like `q` {q.shape}, got {k.shape}."
            )
        if tuple(v.shape[:2]) != tuple(k.shape[:2]):
            raise self.error(
                f"`v` must have the rows and heads of `k` {k.shape[:2]}, got {v.shape}."
            )
        if kv_heads == 0 or heads % kv_heads:
            raise self.error(
                f"`q` has {heads} heads, which is not a multiple of the {kv_heads} "
                "heads of `k`."
            )
        self.require_shape("out", out, (q.shape[0], heads, v.shape[2]))
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
        if args.dropout_p != 0.0:
            raise self.error(
                f"`dropout_p` must be 0 (inference only), got {args.dropout_p}."
            )
        for name in ("alibi_slopes", "block_table"):
            if getattr(args, name) is not None:
                raise self.error(
                    f"`{name}` is supported by the linked flash-attn provider only; "
                    "pass None."
                )
        window = tuple(args.window_size)
        if len(window) != 2:
            raise self.error(f"`window_size` must be (left, right), got {window}.")
        if args.softmax_lse is not None:
            self.require_shape("softmax_lse", args.softmax_lse, (heads, q.shape[0]))
            self.require_dtype("softmax_lse", args.softmax_lse, ("float32",))
        self.scale = (
            head_dim**-0.5 if args.softmax_scale is None else args.softmax_scale
        )
        self.causal = bool(args.causal)
        self.window = window
        self.softcap = args.softcap
        self.groups = heads // kv_heads
