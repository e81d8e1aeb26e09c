"""CPU `linear` (slot 0): NumPy's BLAS on views of the caller's tensors."""

from __future__ import annotations

from infini.ops.base.linear import Linear
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.blas import HostView, MatmulPlan, merge_leading


@implementation(operator="linear", devices=("cpu",), slot=0)
class CpuLinear(Linear):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, bias, out = args.input, args.weight, args.bias, args.out
        input_shape, input_strides = input.shape, input.strides
        out_shape, out_strides = out.shape, out.strides
        # One BLAS call for all leading dimensions when both `input` and `out`
        # can be seen as matrices; else NumPy loops over them.
        merged_input = merge_leading(input_shape, input_strides)
        merged_out = merge_leading(out_shape, out_strides)
        if merged_input is not None and merged_out is not None:
            (input_shape, input_strides), (out_shape, out_strides) = (
                merged_input,
                merged_out,
            )
        weight_t = HostView(weight.shape[::-1], weight.strides[::-1], weight.dtype)
        self.plan = MatmulPlan(
            HostView(input_shape, input_strides, input.dtype),
            weight_t,
            HostView(out_shape, out_strides, out.dtype),
            bias=None
            if bias is None
            else HostView(bias.shape, bias.strides, bias.dtype),
        )

    def launch(self, stream, input, weight, bias, out) -> None:
        self.plan.run(
            input.data_ptr(),
            weight.data_ptr(),
            out.data_ptr(),
            0 if bias is None else bias.data_ptr(),
        )

    def bind_launch(self, stream, input, weight, bias, out):
        if bias is not None:
            return None
        return self.plan.bind(input.data_ptr(), weight.data_ptr(), out.data_ptr())

    @classmethod
    def precompile(cls) -> int:
        """Compiles the small-row product kernel (at most
        `weight_rows.MAX_ROWS` rows by a transposed weight) for each
        precompiled dtype; larger products run NumPy's BLAS."""
        import torch

        import infini.ops
        from infini.ops.native.cpu.precompile import torch_dtypes

        calls = 0
        for dtype in torch_dtypes():
            input = torch.zeros(4, 64, dtype=dtype)
            weight = torch.zeros(32, 64, dtype=dtype)
            out = torch.empty(4, 32, dtype=dtype)
            infini.ops.linear(input, weight, None, out, implementation_index=0)
            calls += 1
        return calls
