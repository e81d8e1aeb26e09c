"""NineToothed `silu_and_mul` (slot 9, NVIDIA):
``out = silu(input[..., :h]) * input[..., h:]``, the elementwise arrangement
of `elementwise.py` over two views of `input` (its halves) and `out`;
computed in float64 and rounded once."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.ninetoothed.elementwise import ElementwiseLaunch
from infini.ops.ninetoothed.language import silu, upcast
from infini.ops.runtime.triton import uses_direct_launch


class _Shifted:
    """The second half of `input` as the direct launch sees it: only its data
    pointer (a torch view would cost microseconds per call)."""

    __slots__ = ("address",)

    def __init__(self, address: int) -> None:
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def application(gate, up, out):
    out = silu(upcast(gate)) * upcast(up)  # noqa: F841 - a store


@implementation(operator="silu_and_mul", devices=("nvidia",), slot=9)
class NineToothedSiluAndMul(SiluAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        half = TensorMeta(
            tuple(out.shape), tuple(input.strides), input.dtype, input.device
        )
        self._launch = ElementwiseLaunch(
            self, "silu_and_mul", application, out, {"gate": half, "up": half}
        )
        self._offset = self.half * input.strides[-1] * input.element_size
        self._direct = uses_direct_launch(self.device)

    def launch(self, stream, input, out) -> None:
        if self._direct:
            up = _Shifted(input.data_ptr() + self._offset)
        else:
            up = input.narrow(-1, self.half, self.half)
        self._launch(stream, input, up, out)
