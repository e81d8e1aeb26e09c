"""CPU `silu_and_mul` (slot 0): the shared elementwise kernel over the two
halves of `input`, seen as two tensors of `out`'s shape."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.native.cpu.activations import silu_and_mul_combine
from infini.ops.native.cpu.elementwise import BinaryElementwise


@implementation(operator="silu_and_mul", devices=("cpu",), slot=0)
class CpuSiluAndMul(SiluAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        # Both halves have `out`'s shape and `input`'s strides; the second
        # starts `half` elements further along the last dimension.
        half = TensorMeta(out.shape, input.strides, input.dtype, input.device)
        self.second_offset = self.half * input.strides[-1] * input.element_size
        self.elementwise = BinaryElementwise(silu_and_mul_combine, out, half, half, 0.0)

    def launch(self, stream, input, out) -> None:
        first_address = input.data_ptr()
        self.elementwise.run(out, first_address, first_address + self.second_offset)
