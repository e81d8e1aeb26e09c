"""CPU `ggml_dequantize` (slot 0): one pass over the packed blocks,
parallel over chunks of rows. An `out` sharing memory with `weight` gets
the result of reading every block first: the blocks are copied aside
before the pass (docs/behaviour.md, "Aliasing")."""

from __future__ import annotations

import numpy as np

from infini.ops.base.ggml_dequantize import GgmlDequantize
from infini.ops.core.geometry import AliasGuard
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.ggml import dequantize_kernel

# Values per parallel chunk, and the size below which the kernel runs
# serially (waking the thread pool costs more than it saves).
CHUNK_ELEMENTS = 65536
PARALLEL_THRESHOLD = 65536


@implementation(operator="ggml_dequantize", devices=("cpu",), slot=0)
class CpuGgmlDequantize(GgmlDequantize):
    def __init__(self, args) -> None:
        super().__init__(args)
        elements = self.rows * self.cols
        parallel = elements >= PARALLEL_THRESHOLD and self.rows > 1
        self.chunks = (
            min(self.rows, max(1, elements // CHUNK_ELEMENTS)) if parallel else 1
        )
        self.weight_stride = args.weight.strides[0]
        self.out_stride = args.out.strides[0]
        self.run = dequantize_kernel(args.quant_type, args.out.dtype, parallel)
        # 16-bit outputs: a float32 row per chunk, rounded into `out`.
        self.scratch = np.empty(
            0 if args.out.dtype == "float32" else self.chunks * self.cols, np.float32
        )
        self.scratch_address = self.scratch.ctypes.data
        self.overlap = AliasGuard(
            args.out, args.out.strides, [(args.weight, args.weight.strides)]
        )

    def launch(self, stream, weight, out) -> None:
        if not self.rows:
            return
        if self.overlap.needs_staging(out.data_ptr(), [weight.data_ptr()]):
            import torch

            blocks = torch.empty_strided(
                weight.shape, weight.stride(), dtype=weight.dtype
            )
            blocks.copy_(weight)
            weight = blocks
        self.run(
            weight.data_ptr(),
            self.weight_stride,
            out.data_ptr(),
            self.out_stride,
            self.rows,
            self.cols,
            self.chunks,
            self.scratch_address,
        )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the serial and parallel kernels of each supported type
        and output dtype."""
        import torch

        import infini.ops
        from infini.ops.base._ggml import FLOAT_DTYPES, GGML_TYPES, SUPPORTED_TYPES

        calls = 0
        for quant_type in SUPPORTED_TYPES:
            entry = GGML_TYPES[quant_type]
            for rows, cols in ((1, 256), (256, 256)):
                weight = torch.zeros(
                    rows,
                    cols // entry.block_elements * entry.block_bytes,
                    dtype=torch.uint8,
                )
                for name in FLOAT_DTYPES:
                    out = torch.empty(rows, cols, dtype=getattr(torch, name))
                    infini.ops.ggml_dequantize(
                        weight, quant_type, rows, cols, out, implementation_index=0
                    )
                    calls += 1
        return calls
