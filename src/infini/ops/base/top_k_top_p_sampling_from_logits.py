"""`top_k_top_p_sampling_from_logits`: FlashInfer-style top-k / top-p
sampling."""

from __future__ import annotations

from infini.ops.base._sampling import TopKTopPSampling, seed_bits

FILTER_APPLY_ORDERS = ("top_k_first", "joint")


class TopKTopPSamplingFromLogits(TopKTopPSampling):
    """FlashInfer `top_k_top_p_sampling_from_logits`: one token per output
    row into `out` (int32 or int64).

    - `logits` ``(batch, vocab)``: float32, float16 or bfloat16, any strides.
      With `indices` (1-D int32/int64), output row ``r`` samples logits row
      ``indices[r]`` and `out` has ``len(indices)`` rows; otherwise `out` is
      ``(batch,)``.
    - `top_k` (int32/int64) and `top_p` (float32/float64) are per output row
      CPU tensors, ``(rows,)`` or ``(1,)`` for every row; ``top_k <= 0`` or
      ``>= vocab`` and ``top_p >= 1`` disable the filters.
    - `filter_apply_order` "top_k_first": top-k, then top-p on the
      renormalised top-k distribution (kept while the mass before a token is
      below `top_p`, at least one token); "joint": both filters on the
      original distribution. A token is drawn from the kept ones in
      proportion to ``softmax(logits)``.
    - `seed` / `offset`: row ``r`` uses the counter-based uniform number
      ``uniform(seed, offset or 0, r)``; equal values give equal results.
      Without `seed` a seed is drawn from torch's default CPU generator.
    - `deterministic` is accepted; results are always deterministic.
    - `check_nan`: a NaN in `logits` raises `ValueError` before anything is
      written. Indices outside the batch also raise before writing.
    """

    name = "top_k_top_p_sampling_from_logits"
    trace_name = "TopKTopPSamplingFromLogits"
    overloads = (
        "logits: Tensor, top_k: Tensor, top_p: Tensor, indices: Tensor|None, "
        "filter_apply_order: str, deterministic: bool, check_nan: bool, "
        "seed: int|None, offset: int|None, out: Tensor!",
    )
    defaults = {"indices": None, "seed": None, "offset": None}
    k_name = "top_k"
    p_name = "top_p"
    host_tensors = ("top_k", "top_p")
    optional_filters = False
    # A new seed or offset on every call must not build a new operator.
    call_scalars = ("seed", "offset")

    def __init__(self, args) -> None:
        super().__init__(args)
        if args.filter_apply_order not in FILTER_APPLY_ORDERS:
            raise self.error(
                "`filter_apply_order` must be 'top_k_first' or 'joint', got "
                f"{args.filter_apply_order!r}."
            )
        self.joint = args.filter_apply_order == "joint"
        self.check_nan = bool(args.check_nan)
        self.bind_call(args.seed, args.offset)

    def bind_call(self, seed: int | None, offset: int | None) -> None:
        """`self.seed`: the call's seed modulo 2**64 (`numpy.uint64`), or None
        (draw one from torch's generator); `self.offset`: the offset modulo
        2**64, 0 when None. Read by `launch`."""
        self.seed = None if seed is None else seed_bits(seed)
        self.offset = seed_bits(offset or 0)
