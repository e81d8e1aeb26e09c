"""PyTorch `add` (slot 1, every device)."""

from __future__ import annotations

from infini.ops.base.add import Add
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.torch._common import shares_memory

# Unsigned types torch has no `add` kernel for: computed in int64, whose
# wrap-around arithmetic gives the same bits.
_WIDE_UNSIGNED = ("uint16", "uint32", "uint64")
_LOW_PRECISION = ("float16", "bfloat16")


@implementation(operator="add", devices="all", slot=1)
class TorchAdd(Add):
    """``torch.add(input, other, alpha=alpha, out=out)``.

    float16/bfloat16 are added in float32 and rounded once (torch rounds
    ``alpha * other`` first); uint16-uint64 are added in int64 and wrapped.
    An `out` sharing memory with an input gets the result through a copy.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        dtype = args.out.dtype
        self.alpha = (
            self.alpha
            if dtype in ("float16", "bfloat16", "float32", "float64")
            else int(self.alpha)
        )
        self.wide_unsigned = dtype in _WIDE_UNSIGNED
        self.low_precision = dtype in _LOW_PRECISION

    def launch(self, stream, input, other, out) -> None:
        import torch

        with stream_context(self.device, stream):
            if self.wide_unsigned:
                result = torch.add(
                    input.to(torch.int64), other.to(torch.int64), alpha=self.alpha
                )
                out.copy_(result)
            elif self.low_precision:
                out.copy_(torch.add(input.float(), other.float(), alpha=self.alpha))
            elif shares_memory(out, input, other):
                out.copy_(torch.add(input, other, alpha=self.alpha))
            else:
                torch.add(input, other, alpha=self.alpha, out=out)
