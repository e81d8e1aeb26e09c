"""`awq_marlin_repack`: AWQ-packed weights into vLLM's Marlin tile
layout."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._marlin import check_repack_arguments, pack_factor


class AwqMarlinRepack(Operator):
    """vLLM `awq_marlin_repack`: rewrites an AWQ weight matrix in the Marlin
    layout, bit-exactly (`base/_marlin.py` describes the layout).

    - `b_q_weight` is int32 ``(size_k, size_n / pack)``, ``pack = 32 /
      num_bits``, packed along n in AWQ's order: bits ``[num_bits * i,
      ...)`` of ``b_q_weight[k, j]`` hold ``W[k, pack * j + order[i]]``,
      ``order`` being ``(0, 2, 4, 6, 1, 3, 5, 7)`` at 4 bits and ``(0, 2,
      1, 3)`` at 8.
    - `num_bits` is 4 or 8. `is_a_8bit` selects the layout of vLLM's
      kernels for 8-bit activations (32 x 32 blocks, another interleave);
      it needs `size_k` to be a multiple of 32.
    - `size_k` is a multiple of 16 and `size_n` of 64 (the Marlin tile).
    - `out` is int32 ``(size_k / 16, size_n * 16 / pack)``; vLLM returns a
      new tensor, here the caller passes it. Both tensors are packed
      (contiguous).

    AWQ zero points are not part of the weight: vLLM converts them
    separately (`awq_to_marlin_zero_points`).
    """

    name = "awq_marlin_repack"
    trace_name = "AwqMarlinRepack"
    overloads = (
        "b_q_weight: Tensor, size_k: int, size_n: int, num_bits: int, "
        "is_a_8bit: bool, out: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        pack = pack_factor(args.num_bits) if args.num_bits in (4, 8) else 1
        check_repack_arguments(self, args, (args.size_k, args.size_n // pack))
