"""apex's fused RMS norm on Cambricon MLUs (`fused_layer_norm_cuda`, the
`rms_norm_affine` its Cambricon build exports) at slot 16."""

from __future__ import annotations

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.torch.staging import packed
from infini.ops.linked.transports import extension_function, unsupported

DTYPES = ("float32", "float16", "bfloat16")


@implementation(operator="rms_norm", devices=("cambricon",), slot=16)
class CambriconApexRmsNorm(RmsNorm):
    """``rms_norm_affine(input, weight, ..., epsilon, ...)`` returns the
    normalised tensor, copied into `out`.

    The contract is the original's symbol, ``rms_norm_affine(Tensor const&,
    Tensor const&, Tensor const&, double, long)``; the adapter assumes the
    extension module exposes it to Python under the same name with the
    arguments ``(input, weight, out, epsilon, hidden)`` in that order.
    Neither the module nor an MLU was at hand: the contract is checked by
    the configure step wherever apex is installed, the adapter only by
    review and by tests with a stand-in module.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        if input.dtype not in DTYPES or weight.dtype != input.dtype:
            raise unsupported(
                self.name,
                "apex",
                f"requires `input` and `weight` of one dtype among "
                f"{', '.join(DTYPES)}, got {input.dtype} and {weight.dtype}.",
            )
        for name, meta in (("input", input), ("weight", weight), ("out", out)):
            if not packed(meta):
                raise unsupported(
                    self.name,
                    "apex",
                    f"requires a packed (contiguous) `{name}`, got strides "
                    f"{meta.strides} for shape {meta.shape}.",
                )
        self.hidden = input.shape[-1]
        self.empty = input.numel == 0
        self.function = extension_function(
            __name__, self.device.platform, "rms_norm_affine"
        )

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        with stream_context(self.device, stream):
            result = self.function(input, weight, out, self.eps, self.hidden)
            if result is not None and result.data_ptr() != out.data_ptr():
                out.copy_(result)
