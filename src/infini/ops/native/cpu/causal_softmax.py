"""The CPU causal softmax shared by `causal_softmax` and
`causal_softmax_infinilm`."""

from __future__ import annotations

from .elementwise import AliasGuard, staging_like
from .rows import RowLayout, causal_softmax_kernels


class CausalSoftmaxLaunch:
    """Plans and launches the row kernel; mixed into the implementations,
    whose base validates the arguments first."""

    def plan(self, input, out) -> None:
        self.layout = layout = RowLayout(input.shape, [out.strides, input.strides])
        self.q = input.shape[-2]
        serial, parallel = causal_softmax_kernels(input.dtype)
        self.kernel = parallel if layout.chunks > 1 else serial
        self.alias = AliasGuard(out, out.strides, [(input, input.strides)])

    def launch(self, stream, input, out) -> None:
        layout = self.layout
        if layout.numel == 0:
            return
        out_address = out.data_ptr()
        input_address = input.data_ptr()
        target = out
        if self.alias.needs_staging(out_address, (input_address,)):
            target = staging_like(out)
            out_address = target.data_ptr()
        out_step, input_step = layout.col_steps
        self.kernel(
            out_address,
            input_address,
            layout.spans[0],
            layout.spans[1],
            layout.rows,
            layout.cols,
            self.q,
            layout.shape,
            layout.strides,
            out_step,
            input_step,
            layout.chunks,
        )
        if target is not out:
            out.copy_(target)
