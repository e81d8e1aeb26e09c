"""`gptq_marlin_repack`: GPTQ-packed weights into vLLM's Marlin tile
layout."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._marlin import check_repack_arguments, pack_factor

PERM_DTYPES = ("int32", "int64")


class GptqMarlinRepack(Operator):
    """vLLM `gptq_marlin_repack`: rewrites a GPTQ weight matrix in the
    Marlin layout, bit-exactly (`base/_marlin.py` describes the layout).

    - `b_q_weight` is int32 ``(size_k / pack, size_n)``, ``pack = 32 /
      num_bits``, packed along k: code ``W[k, n]`` is bits ``[num_bits *
      (k % pack), ...)`` of ``b_q_weight[k // pack, n]``.
    - `perm` (int32 or int64, 1-D) is empty, or GPTQ's act-order
      permutation of ``size_k`` rows: row ``k`` of the result is then
      ``W[perm[k]]`` (vLLM passes ``argsort(g_idx)``, so the rows come
      grouped by quantisation group). Values outside ``[0, size_k)`` raise
      when the operator runs, before anything is written.
    - `num_bits` is 4 or 8. `is_a_8bit` selects the layout of vLLM's
      kernels for 8-bit activations (32 x 32 blocks, another interleave);
      it needs `size_k` to be a multiple of 32 (vLLM's CUDA check asks for
      16 only, and leaves the last 16 rows unwritten otherwise).
    - `size_k` is a multiple of 16 and `size_n` of 64 (the Marlin tile).
    - `out` is int32 ``(size_k / 16, size_n * 16 / pack)``; vLLM returns a
      new tensor, here the caller passes it. Every tensor is packed
      (contiguous).
    """

    name = "gptq_marlin_repack"
    trace_name = "GptqMarlinRepack"
    overloads = (
        "b_q_weight: Tensor, perm: Tensor, size_k: int, size_n: int, "
        "num_bits: int, is_a_8bit: bool, out: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        size_k, size_n = args.size_k, args.size_n
        pack = pack_factor(args.num_bits) if args.num_bits in (4, 8) else 1
        check_repack_arguments(self, args, (size_k // pack, size_n))
        perm = args.perm
        self.require_dtype("perm", perm, PERM_DTYPES)
        self.require_ndim("perm", perm, (1,))
        if perm.numel not in (0, size_k):
            raise self.error(
                f"`perm` must be empty or hold `size_k` ({size_k}) rows, got "
                f"shape {perm.shape}."
            )
        if not perm.is_contiguous():
            raise self.error(
                f"`perm` must be packed (contiguous), got strides {perm.strides}."
            )
        self.has_perm = perm.numel > 0
