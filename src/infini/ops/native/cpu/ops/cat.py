"""CPU `cat` (slot 0): one bit-copy pass per member into its slice of `out`."""

from __future__ import annotations

from infini.ops.base.cat import Cat
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.conversions import copy_kernels
from infini.ops.native.cpu.elementwise import UnaryLaunch
from infini.ops.native.cpu.layout import staging_like
from infini.ops.native.cpu.precompile import torch_dtypes


@implementation(operator="cat", devices=("cpu",), slot=0)
class CpuCat(Cat):
    def __init__(self, args) -> None:
        super().__init__(args)
        out, dim = args.out, self.dim
        size = out.element_size
        kernels = copy_kernels(size)
        self.out_bytes = span(out.shape, out.strides) * size
        # Per member with elements: (index in `tensors`, byte offset of its
        # slice of `out`, the copy, its byte span).
        self.copies = []
        offset = 0
        for index, meta in self.members:
            if meta.numel:
                self.copies.append(
                    (
                        index,
                        offset * out.strides[dim] * size,
                        UnaryLaunch(meta.shape, out.strides, meta.strides, kernels),
                        span(meta.shape, meta.strides) * size,
                        meta.strides == out.strides,
                    )
                )
            offset += meta.shape[dim]

    def _needs_staging(self, tensors, out_address: int) -> bool:
        """Whether some member overlaps `out` other than by being exactly its
        own slice (a copy onto itself, which is harmless)."""
        out_end = out_address + self.out_bytes
        for index, offset, _, nbytes, same_strides in self.copies:
            address = tensors[index].data_ptr()
            if address < out_end and out_address < address + nbytes:
                if not (same_strides and address == out_address + offset):
                    return True
        return False

    def launch(self, stream, tensors, out) -> None:
        if not self.copies:
            return
        target = out
        out_address = out.data_ptr()
        if self._needs_staging(tensors, out_address):
            target = staging_like(out)
            out_address = target.data_ptr()
        for index, offset, copy, _, _ in self.copies:
            copy(out_address + offset, tensors[index].data_ptr())
        if target is not out:
            out.copy_(target)

    @classmethod
    def precompile(cls) -> int:
        """Compiles the copies of each element size: along dim 0 (one flat
        pass), along dim 1 (strided rows) and of a transposed member (tiled),
        each small (serial) and large (parallel)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for rows in (8, 512):
                a = torch.zeros(rows, 256, dtype=dtype)
                b = torch.zeros(256, rows, dtype=dtype).t()
                for tensors, dim in (([a, a], 0), ([a, a], 1), ([b, b], 0)):
                    shape = list(tensors[0].shape)
                    shape[dim] *= len(tensors)
                    out = torch.empty(shape, dtype=dtype)
                    infini.ops.cat(tensors, dim, out, implementation_index=0)
                    calls += 1
        return calls
