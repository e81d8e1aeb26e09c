"""vLLM's `rms_norm` and `silu_and_mul` on accelerators that build vLLM
themselves (MetaX, Moore): the platforms' bindings subclass these.

Their contracts list the exported C++ functions (`required_symbols`), which
take `at::Tensor` and so cannot be called through `ctypes`; the same library
registers them as `_C::rms_norm` and `_C::silu_and_mul`, and the adapters call
that registration on the caller's stream. vLLM reads packed tensors of one
dtype: anything else is rejected before a launch.
"""

from __future__ import annotations

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.streams import stream_context
from infini.ops.linked.torch.staging import packed
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")


def _check(operator, metas: dict, dtype: str) -> None:
    if dtype not in PROVIDER_DTYPES:
        raise unsupported(
            operator.name,
            "vllm",
            f"does not support dtype {dtype}; supported: {', '.join(PROVIDER_DTYPES)}.",
        )
    for name, meta in metas.items():
        if meta.dtype != dtype:
            raise unsupported(
                operator.name,
                "vllm",
                f"requires `{name}` to have dtype {dtype}, got {meta.dtype}.",
            )
        if not packed(meta):
            raise unsupported(
                operator.name,
                "vllm",
                f"requires a packed (contiguous) `{name}`, "
                f"got strides {meta.strides} for shape {meta.shape}.",
            )


class VllmDeviceRmsNorm(RmsNorm):
    """``_C::rms_norm(out, input, weight, epsilon)``."""

    def __init__(self, args) -> None:
        super().__init__(args)
        _check(
            self,
            {"input": args.input, "weight": args.weight, "out": args.out},
            args.input.dtype,
        )
        self.empty = args.input.numel == 0
        self.kernel = dispatcher_operator(
            type(self).__module__, self.device.platform, "_C::rms_norm"
        )

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        with stream_context(self.device, stream):
            self.kernel(out, input, weight, self.eps)


class VllmDeviceSiluAndMul(SiluAndMul):
    """``_C::silu_and_mul(out, input)``."""

    def __init__(self, args) -> None:
        super().__init__(args)
        _check(self, {"input": args.input, "out": args.out}, args.input.dtype)
        self.empty = args.out.numel == 0
        self.kernel = dispatcher_operator(
            type(self).__module__, self.device.platform, "_C::silu_and_mul"
        )

    def launch(self, stream, input, out) -> None:
        if self.empty:
            return
        with stream_context(self.device, stream):
            self.kernel(out, input)
