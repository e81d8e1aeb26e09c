"""`paged_attention_infinilm`: decode attention over a paged KV cache."""

from __future__ import annotations

from infini.ops.core.operator import Operator

PAGED_ATTENTION_DTYPES = ("float32", "float16", "bfloat16")
INDEX_DTYPES = ("int32", "int64")

# What a scan of the index tensors found (the CPU kernels return these codes;
# `PagedAttentionChecks.index_error` turns them into messages).
INDEX_OK = 0
BAD_SEQ_LEN = 1
BAD_BLOCK = 2
BAD_CUM_START = 3
BAD_CUM_ORDER = 4
BAD_CUM_END = 5
QUERY_LONGER_THAN_SEQ = 6


class PagedAttentionChecks:
    """Validation shared by the decode and prefill paged attention bases.

    Shapes and dtypes are checked when the operator is built. The values of
    `block_tables`, `seq_lens` (and `cum_seq_lens_q`) are checked when it
    runs, before anything is written: implementations that scan them in a
    kernel report the first bad one through `index_error`; the others call
    `check_indices`, which scans with torch.
    """

    def check_common(self, args) -> None:
        q, k_cache, v_cache = args.q, args.k_cache, args.v_cache
        block_tables, seq_lens, out = args.block_tables, args.seq_lens, args.out
        self.require_dtype("q", q, PAGED_ATTENTION_DTYPES)
        self.require_same_dtype(
            "q", {"q": q, "k_cache": k_cache, "v_cache": v_cache, "out": out}
        )
        self.require_ndim("q", q, (3,))
        self.require_ndim("k_cache", k_cache, (4,))
        tokens, heads, head_size = q.shape
        blocks, kv_heads, block_size, cache_head_size = k_cache.shape
        if cache_head_size != head_size:
            raise self.error(
                f"`k_cache` must be (blocks, kv_heads, block_size, {head_size}) to "
                f"match the head size of `q` {q.shape}, got {k_cache.shape}."
            )
        if kv_heads == 0 or heads % kv_heads != 0:
            raise self.error(
                f"the {kv_heads} kv heads of `k_cache` {k_cache.shape} must divide "
                f"the {heads} heads of `q` {q.shape}."
            )
        if block_size == 0:
            raise self.error(f"`k_cache` has block size 0: shape {k_cache.shape}.")
        self.require_shape(
            "v_cache", v_cache, k_cache.shape, "(the shape of `k_cache`)"
        )
        self.require_shape("out", out, q.shape, "(the shape of `q`)")
        self.require_writable("out", out)
        self.require_dtype("block_tables", block_tables, INDEX_DTYPES)
        self.require_dtype("seq_lens", seq_lens, INDEX_DTYPES)
        self.require_ndim("block_tables", block_tables, (2,))
        seqs = block_tables.shape[0]
        self.require_shape(
            "seq_lens", seq_lens, (seqs,), "(one length per row of `block_tables`)"
        )
        slopes = args.alibi_slopes
        if slopes is not None:
            self.require_dtype("alibi_slopes", slopes, ("float32",))
            self.require_shape(
                "alibi_slopes", slopes, (heads,), "(one per head of `q`)"
            )
        self.seqs, self.tokens, self.heads, self.head_size = (
            seqs,
            tokens,
            heads,
            head_size,
        )
        self.blocks, self.kv_heads, self.block_size = blocks, kv_heads, block_size
        self.max_blocks = block_tables.shape[1]
        self.scale = float(args.scale)
        window = args.window
        if window < 0:
            raise self.error(
                f"`window` must be 0 (no window) or a positive number of "
                f"positions, got {window}."
            )
        self.window = int(window)

    def index_error(self, code: int, seq: int, position: int, value: int):
        """The `ValueError` for a scan result (`code`, at sequence `seq`,
        element `position` of that row where it applies, holding `value`)."""
        capacity = self.max_blocks * self.block_size
        messages = {
            BAD_SEQ_LEN: f"`seq_lens[{seq}]` is {value}, out of the range "
            f"[0, {capacity}] (`block_tables` holds {self.max_blocks} blocks of "
            f"{self.block_size} tokens per sequence)",
            BAD_BLOCK: f"`block_tables[{seq}, {position}]` is {value}, out of the "
            f"range [0, {self.blocks}) of cache blocks",
            BAD_CUM_START: f"`cum_seq_lens_q[0]` is {value}; it must be 0",
            BAD_CUM_ORDER: f"`cum_seq_lens_q` must not decrease, but "
            f"`cum_seq_lens_q[{seq + 1}]` is {value}, below the element before it",
            BAD_CUM_END: f"`cum_seq_lens_q[{self.seqs}]` is {value}; it must be "
            f"{self.tokens}, the number of tokens in `q`",
            QUERY_LONGER_THAN_SEQ: f"sequence {seq} has {position} query tokens "
            f"but `seq_lens[{seq}]` is {value}; the queries are the last tokens of "
            "the sequence",
        }
        return self.error(messages[code] + "; nothing was written.")

    def check_indices(self, block_tables, seq_lens, cum_seq_lens_q=None) -> None:
        """Scans the index tensors with torch (for implementations whose
        kernels do not); raises `index_error` for the first bad value."""
        import torch

        lengths = seq_lens.to(torch.int64)
        capacity = self.max_blocks * self.block_size
        bad = ((lengths < 0) | (lengths > capacity)).nonzero()
        if len(bad):
            seq = int(bad[0])
            raise self.index_error(BAD_SEQ_LEN, seq, 0, int(lengths[seq]))
        if cum_seq_lens_q is not None:
            cum = cum_seq_lens_q.to(torch.int64)
            if int(cum[0]) != 0:
                raise self.index_error(BAD_CUM_START, 0, 0, int(cum[0]))
            steps = cum[1:] - cum[:-1]
            bad = (steps < 0).nonzero()
            if len(bad):
                seq = int(bad[0])
                raise self.index_error(BAD_CUM_ORDER, seq, 0, int(cum[seq + 1]))
            if int(cum[-1]) != self.tokens:
                raise self.index_error(BAD_CUM_END, 0, 0, int(cum[-1]))
            bad = (steps > lengths).nonzero()
            if len(bad):
                seq = int(bad[0])
                raise self.index_error(
                    QUERY_LONGER_THAN_SEQ, seq, int(steps[seq]), int(lengths[seq])
                )
        if self.max_blocks == 0 or self.seqs == 0:
            return
        used = (lengths + self.block_size - 1) // self.block_size
        columns = torch.arange(self.max_blocks, device=lengths.device)
        in_use = columns[None, :] < used[:, None]
        table = block_tables.to(torch.int64)
        bad = (in_use & ((table < 0) | (table >= self.blocks))).nonzero()
        if len(bad):
            seq, position = (int(i) for i in bad[0])
            raise self.index_error(BAD_BLOCK, seq, position, int(table[seq, position]))


class PagedAttentionInfinilm(PagedAttentionChecks, Operator):
    """Decode attention over a paged KV cache: one query token per sequence.

    - `q` and `out` are ``(seqs, heads, head_size)``; `k_cache` and `v_cache`
      are ``(blocks, kv_heads, block_size, head_size)``; `block_tables` is
      ``(seqs, max_blocks)`` and `seq_lens` ``(seqs,)``, both int32 or int64.
    - Sequence `s` has ``n = seq_lens[s]`` cached tokens; token `j` lives in
      cache block ``block_tables[s, j // block_size]`` at offset
      ``j % block_size``. Only the first ``ceil(n / block_size)`` entries of
      a row are read.
    - GQA: `kv_heads` divides `heads`; query head `h` reads kv head
      ``h // (heads / kv_heads)``.
    - ``out[s, h] = softmax(scale * q[s, h] . K[j] + bias_j) @ V`` over
      ``j < n``, where ``bias_j = alibi_slopes[h] * (j - (n - 1))`` when
      `alibi_slopes` (float32, ``(heads,)``) is given, else 0. A sequence
      with ``n == 0`` gives zeros.
    - `window` (our extension, a trailing keyword; docs/behaviour.md,
      "Sliding-window attention"): 0, the default, attends every cached
      token as above; ``W > 0`` only the last `W` positions, ``j > n - 1 -
      W`` (the sliding window of Gemma-3 and Mistral).
    - float32, float16 and bfloat16 (`q`, the caches and `out` share one);
      computed in float32 with an online softmax, rounded once. Any strides.
    - Index values are checked before anything is written: ``0 <= n <=
      max_blocks * block_size`` and every block read within
      ``[0, blocks)``; a bad one raises `ValueError` naming the element.
    """

    name = "paged_attention_infinilm"
    trace_name = "PagedAttentionInfinilm"
    overloads = (
        "q: Tensor, k_cache: Tensor, v_cache: Tensor, block_tables: Tensor, "
        "seq_lens: Tensor, alibi_slopes: Tensor|None = None, scale: float, "
        "out: Tensor!, window: int = 0",
    )
    defaults = {"alibi_slopes": None, "window": 0}

    def __init__(self, args) -> None:
        super().__init__(args)
        self.check_common(args)
        if self.tokens != self.seqs:
            raise self.error(
                f"`q` must have one token per sequence: {self.seqs} rows (the rows "
                f"of `block_tables`), got shape {args.q.shape}."
            )
