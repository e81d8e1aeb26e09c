"""CPU `silu_and_mul` (slot 0): the shared elementwise kernel over the two
halves of `input`, seen as two tensors of `out`'s shape."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.tensor import TensorMeta
from infini.ops.native.cpu.activations import silu_and_mul_combine
from infini.ops.native.cpu.elementwise import BinaryElementwise
from infini.ops.native.cpu.precompile import torch_dtypes


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

    @classmethod
    def precompile(cls) -> int:
        """Compiles the flat kernels (one token: both halves contiguous) and
        the strided ones (several tokens), each serial and parallel."""
        import torch

        import infini.ops

        function = getattr(infini.ops, cls.name)
        calls = 0
        for dtype in torch_dtypes():
            for tokens, half in ((1, 8), (1, 1 << 17), (8, 8), (512, 256)):
                input = torch.zeros(tokens, 2 * half, dtype=dtype)
                out = torch.empty(tokens, half, dtype=dtype)
                function(input, out, implementation_index=0)
                calls += 1
        return calls
