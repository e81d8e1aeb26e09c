"""Shared by `max_unpool2d` and `max_unpool3d`: the original's two
overloads, one with the pooling window, one with the output size."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class MaxUnpool(Operator):
    """The inverse of max pooling: `out` is zero except where `indices`
    (flat positions within each output plane) put the values of `input`.

    Overload 0 gives the pooling window (`kernel_size`, `stride`, which
    defaults to `kernel_size`, and `padding`) and optionally `output_size`;
    without `output_size` each spatial size is
    ``(in - 1) * stride - 2 * padding + kernel_size``. Overload 1 gives
    `output_size` only. Both call ATen's ``max_unpool{2,3}d`` with the
    resulting output size.
    """

    # Filled by subclasses.
    spatial_dims = 2
    defaults = {"stride": None, "output_size": None}
    aten_overload_aliases = {0: 1}

    def __init__(self, args) -> None:
        super().__init__(args)
        dims = self.spatial_dims
        input = args.input
        if input.ndim not in (dims + 1, dims + 2):
            raise self.error(
                f"`input` must have {dims + 1} or {dims + 2} dimensions, got shape "
                f"{input.shape}."
            )
        if args.overload_index == 0 and args.output_size is None:
            kernel = self._per_dim("kernel_size", args.kernel_size)
            stride = (
                kernel
                if args.stride is None or len(args.stride) == 0
                else self._per_dim("stride", args.stride)
            )
            padding = self._per_dim("padding", args.padding)
            self.window = {"stride": list(stride), "padding": list(padding)}
            size = tuple(
                (n - 1) * s - 2 * p + k
                for n, s, p, k in zip(
                    input.shape[-dims:], stride, padding, kernel, strict=True
                )
            )
        else:
            if args.overload_index == 0:
                self.window = {
                    "stride": list(
                        self._per_dim("kernel_size", args.kernel_size)
                        if args.stride is None or len(args.stride) == 0
                        else self._per_dim("stride", args.stride)
                    ),
                    "padding": list(self._per_dim("padding", args.padding)),
                }
            size = tuple(args.output_size)
            if len(size) not in (dims, dims + 2):
                raise self.error(
                    f"`output_size` must have {dims} entries, got {list(size)}."
                )
            size = size[-dims:]
        if any(n <= 0 for n in size):
            raise self.error(f"the output size {list(size)} must be positive.")
        self.output_size = size

    def _per_dim(self, name: str, values) -> tuple[int, ...]:
        dims = self.spatial_dims
        values = tuple(values)
        if len(values) == 1:
            values = values * dims
        if len(values) != dims:
            raise self.error(
                f"`{name}` must have 1 or {dims} entries, got {list(values)}."
            )
        return values

    # Filled by `__init__` for overload 0: ATen's 3-d schema also takes the
    # window's `stride` and `padding`.
    window: dict = {}

    def aten_arguments(self, args) -> tuple[dict, dict]:
        return {"output_size": list(self.output_size), **self.window}, {}
