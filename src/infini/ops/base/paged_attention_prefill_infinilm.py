"""`paged_attention_prefill_infinilm`: causal prefill attention over a paged
KV cache."""

from __future__ import annotations

from infini.ops.base.paged_attention_infinilm import (
    INDEX_DTYPES,
    PagedAttentionChecks,
)
from infini.ops.core.operator import Operator


class PagedAttentionPrefillInfinilm(PagedAttentionChecks, Operator):
    """Causal attention of each sequence's new tokens over its paged cache.

    - `q` and `out` are ``(total_tokens, heads, head_size)``: the query
      tokens of every sequence, one after another. `cum_seq_lens_q`
      ``(seqs + 1,)`` gives their spans: sequence `s` owns rows
      ``cum_seq_lens_q[s] .. cum_seq_lens_q[s + 1]`` (so ``cum[0] == 0``, it
      never decreases and ``cum[seqs] == total_tokens``).
    - `k_cache`, `v_cache`, `block_tables` and `seq_lens` as in
      `paged_attention_infinilm`: ``n = seq_lens[s]`` is the sequence's total
      length in the cache, its new tokens included; the ``m`` query tokens
      are its last ``m`` positions (``m <= n``).
    - Query token `i` of sequence `s` sits at position ``p = n - m + i`` and
      attends cache tokens ``j <= p`` (causal, bottom-right aligned):
      ``softmax(scale * q . K[j] + alibi_slopes[h] * (j - p)) @ V``, the bias
      only when `alibi_slopes` is given. GQA as in the decode operator.
    - `window` (our extension, as in the decode operator): with ``W > 0``
      the token attends only ``p - W < j <= p``, its last `W` positions.
    - float32, float16 and bfloat16; float32 accumulation with an online
      softmax; any strides; index values checked before anything is written.
    """

    name = "paged_attention_prefill_infinilm"
    trace_name = "PagedAttentionPrefillInfinilm"
    overloads = (
        "q: Tensor, k_cache: Tensor, v_cache: Tensor, block_tables: Tensor, "
        "seq_lens: Tensor, cum_seq_lens_q: Tensor, alibi_slopes: Tensor|None = None, "
        "scale: float, out: Tensor!, window: int = 0",
    )
    defaults = {"alibi_slopes": None, "window": 0}

    def __init__(self, args) -> None:
        super().__init__(args)
        self.check_common(args)
        cum = args.cum_seq_lens_q
        self.require_dtype("cum_seq_lens_q", cum, INDEX_DTYPES)
        self.require_shape(
            "cum_seq_lens_q",
            cum,
            (self.seqs + 1,),
            "(one more than the rows of `block_tables`)",
        )
