"""CPU `gptq_marlin_repack` (slot 0): one pass over the Marlin tiles,
parallel over groups of tiles (`native/cpu/marlin.py`)."""

from __future__ import annotations

from infini.ops.base._indexing import index_error
from infini.ops.base.gptq_marlin_repack import GptqMarlinRepack
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.marlin import repack_kernel, run_repack


@implementation(operator="gptq_marlin_repack", devices=("cpu",), slot=0)
class CpuGptqMarlinRepack(GptqMarlinRepack):
    def __init__(self, args) -> None:
        super().__init__(args)
        self.num_bits, self.is_a_8bit = args.num_bits, args.is_a_8bit
        self.size_k, self.size_n = args.size_k, args.size_n
        self.perm_dtype = args.perm.dtype if self.has_perm else None
        self.empty = args.out.numel == 0
        repack_kernel("gptq", self.num_bits, self.perm_dtype)

    def launch(self, stream, b_q_weight, perm, out) -> None:
        if self.empty:
            return
        bad = run_repack(
            "gptq",
            self.num_bits,
            self.is_a_8bit,
            self.perm_dtype,
            out,
            b_q_weight,
            perm,
            self.size_k,
            self.size_n,
        )
        if bad >= 0:
            raise index_error(
                self, "perm", (bad,), int(perm[bad]), 0, self.size_k, "rows of `W`"
            )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each bit width, with and without `perm`."""
        import torch

        import infini.ops

        calls = 0
        for num_bits in (4, 8):
            pack = 32 // num_bits
            weight = torch.zeros(64 // pack, 64, dtype=torch.int32)
            out = torch.empty(4, 64 * 16 // pack, dtype=torch.int32)
            for perm in (torch.empty(0, dtype=torch.int32), torch.arange(64).int()):
                infini.ops.gptq_marlin_repack(
                    weight, perm, 64, 64, num_bits, False, out, implementation_index=0
                )
                calls += 1
        return calls
