"""CPU `awq_marlin_repack` (slot 0): one pass over the Marlin tiles,
parallel over groups of tiles (`native/cpu/marlin.py`)."""

from __future__ import annotations

from infini.ops.base.awq_marlin_repack import AwqMarlinRepack
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.marlin import repack_kernel, run_repack


@implementation(operator="awq_marlin_repack", devices=("cpu",), slot=0)
class CpuAwqMarlinRepack(AwqMarlinRepack):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.num_bits, self.is_a_8bit = args.num_bits, args.is_a_8bit
        self.size_k, self.size_n = args.size_k, args.size_n
        self.empty = args.out.numel == 0
        repack_kernel("awq", self.num_bits, None)

    def launch(self, stream, b_q_weight, out) -> None:
        if self.empty:
            return
        run_repack(
            "awq",
            self.num_bits,
            self.is_a_8bit,
            None,
            out,
            b_q_weight,
            None,
            self.size_k,
            self.size_n,
        )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each bit width."""
        import torch

        import infini.ops

        calls = 0
        for num_bits in (4, 8):
            pack = 32 // num_bits
            weight = torch.zeros(64, 64 // pack, dtype=torch.int32)
            out = torch.empty(4, 64 * 16 // pack, dtype=torch.int32)
            infini.ops.awq_marlin_repack(
                weight, 64, 64, num_bits, False, out, implementation_index=0
            )
            calls += 1
        return calls
