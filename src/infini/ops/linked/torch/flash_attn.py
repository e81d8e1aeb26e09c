"""flash-attn's CUDA extension (`flash_attn_2_cuda`) for accelerators that
build it: the platforms' bindings subclass these.

The contracts list the C++ functions `flash::mha_varlen_fwd` and
`flash::mha_fwd_kvcache`, which take `at::Tensor` (so `ctypes` cannot call
them) and are not dispatcher operators; the extension module exposes them to
Python as `varlen_fwd` and `fwd_kvcache`, which the adapters call on the
caller's stream (`transports.extension_function`).

flash-attn's kernels take float16 and bfloat16, head sizes up to 256 that
are multiples of 8, values with the keys' head size, paged caches with
blocks of a multiple of 256 tokens, and tensors whose last dimension is
packed; anything else raises before a launch. They write `+inf` as the
log-sum-exp of a row with no visible key, where the bases document `-inf`.
No GPU with flash-attn was at hand when these were written: the contracts
are checked by the configure step wherever flash-attn is installed, the
adapters only by review and by tests with a stand-in module.
"""

from __future__ import annotations

from infini.ops.base.flash_attn_varlen_func import FlashAttnVarlenFunc
from infini.ops.base.flash_attn_with_kvcache import FlashAttnWithKvcache
from infini.ops.core.streams import stream_context
from infini.ops.linked.transports import extension_function, unsupported

PROVIDER = "flash-attn"
DTYPES = ("float16", "bfloat16")
LARGEST_HEAD_SIZE = 256
HEAD_SIZE_ALIGNMENT = 8
PAGE_ALIGNMENT = 256


def _check(operator, args, tensors: dict, cache: str | None) -> None:
    """Raises for what flash-attn cannot take; `cache` names the paged key
    cache in `tensors` (None when the keys are not paged)."""
    q = args.q
    if q.dtype not in DTYPES:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"does not support dtype {q.dtype}; supported: {', '.join(DTYPES)}.",
        )
    head_size = q.shape[-1]
    if head_size > LARGEST_HEAD_SIZE or head_size % HEAD_SIZE_ALIGNMENT:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"requires a head size that is a multiple of {HEAD_SIZE_ALIGNMENT} up "
            f"to {LARGEST_HEAD_SIZE}, got {head_size}.",
        )
    if args.out.shape[-1] != head_size:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"requires values with the head size of the keys ({head_size}), got "
            f"{args.out.shape[-1]}.",
        )
    if cache is not None and tensors[cache].shape[1] % PAGE_ALIGNMENT:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"requires paged blocks of a multiple of {PAGE_ALIGNMENT} tokens, got "
            f"{tensors[cache].shape[1]}.",
        )
    for name, meta in tensors.items():
        if meta is not None and meta.shape[-1] > 1 and meta.strides[-1] != 1:
            raise unsupported(
                operator.name,
                PROVIDER,
                f"requires `{name}` with a packed last dimension, got strides "
                f"{meta.strides} for shape {meta.shape}.",
            )


class FlashAttnVarlen(FlashAttnVarlenFunc):
    """``flash_attn_2_cuda.varlen_fwd``: flash-attn's own forward, with
    `out` passed in and `softmax_lse` copied from what it returns."""

    def __init__(self, args) -> None:
        super().__init__(args)
        _check(
            self,
            args,
            {"q": args.q, "k": args.k, "v": args.v, "out": args.out},
            "k" if self.paged else None,
        )
        self.empty = args.q.shape[0] == 0
        self.function = extension_function(
            type(self).__module__, self.device.platform, "varlen_fwd"
        )

    def launch(
        self, stream, q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes,
        block_table, out, softmax_lse, s_dmask,
    ) -> None:  # fmt: skip
        if self.empty:
            return
        with stream_context(self.device, stream):
            _, lse, *_ = self.function(
                q, k, v, out, cu_seqlens_q, cu_seqlens_k,
                None, None, block_table, alibi_slopes,
                self.max_seqlen_q, self.max_seqlen_k, 0.0, self.scale,
                False, self.causal, self.window[0], self.window[1],
                self.softcap, False, None,
            )  # fmt: skip
            if softmax_lse is not None:
                softmax_lse.copy_(lse)


class FlashAttnKvcache(FlashAttnWithKvcache):
    """``flash_attn_2_cuda.fwd_kvcache``: flash-attn's decoding forward,
    which also appends `k` and `v` to the caches (and rotates them); an
    integer `cache_seqlens` becomes the int32 per-sequence tensor it takes."""

    def __init__(self, args) -> None:
        super().__init__(args)
        _check(
            self,
            args,
            {
                "q": args.q,
                "k_cache": args.k_cache,
                "v_cache": args.v_cache,
                "k": args.k,
                "v": args.v,
                "out": args.out,
            },
            "k_cache" if self.paged else None,
        )
        self.empty = args.q.numel == 0
        self.rotary_interleaved = bool(args.rotary_interleaved)
        self.num_splits = args.num_splits
        self.function = extension_function(
            type(self).__module__, self.device.platform, "fwd_kvcache"
        )

    def launch(
        self, stream, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin,
        cache_seqlens, cache_batch_idx, cache_leftpad, block_table, alibi_slopes,
        out, softmax_lse,
    ) -> None:  # fmt: skip
        import torch

        if self.empty:
            return
        with stream_context(self.device, stream):
            if cache_seqlens is None and self.cache_length is not None:
                cache_seqlens = torch.full(
                    (self.batch,), self.cache_length, dtype=torch.int32,
                    device=q.device,
                )  # fmt: skip
            _, lse = self.function(
                q, k_cache, v_cache, k, v, cache_seqlens, rotary_cos, rotary_sin,
                cache_batch_idx, cache_leftpad, block_table, alibi_slopes, out,
                self.scale, self.causal, self.window[0], self.window[1],
                self.softcap, self.rotary_interleaved, self.num_splits,
            )  # fmt: skip
            if softmax_lse is not None:
                softmax_lse.copy_(lse)
