"""Shared by the convolution family (`conv1d`, `conv2d`, `conv3d`,
`convolution`, `conv_infinilm`): checking the arguments and resolving them
into one geometry that every implementation plans from."""

from __future__ import annotations

from infini.ops.core.operator import Operator

CONVOLUTION_DTYPES = ("float32", "float64", "float16", "bfloat16")


class ConvolutionOperator(Operator):
    """The checks and the resolved geometry of an N-d convolution (1 to 3
    spatial dimensions), as PyTorch's ``torch.nn.functional.conv{1,2,3}d``
    and ``conv_transpose{1,2,3}d`` define them.

    Rules shared by the family:

    - float32, float64, float16 and bfloat16, one dtype for `input`,
      `weight`, `bias` and `out`. 16-bit floats are computed in float32 and
      rounded once.
    - Any strides for every tensor; `out` may share memory with the inputs
      (they are read as they were before the call).
    - `stride`, `dilation` (positive), a list `padding` and `output_padding`
      (non-negative) take one entry per spatial dimension, or a single one
      for all, as PyTorch does.
    - A string `padding` is ``"valid"`` (none) or ``"same"`` (the output as
      large as the input; stride 1 only; an odd total of zeros puts the
      extra one after the input, as PyTorch does).
    - Every spatial output size must be positive (the dilated kernel fits
      in the padded input); a batch of 0 is accepted.
    - Groups split the input and output channels into `groups` equal parts,
      part ``g`` of the output seeing only part ``g`` of the input.

    After `resolve` the operator holds:

    - `spatial_dims` (1 to 3), `batched` (whether `input` has a batch
      dimension; an unbatched one is treated as a batch of 1);
    - `batch`, `in_channels`, `out_channels`, `groups`;
    - `input_size`, `kernel_size`, `output_size` (spatial tuples);
    - `stride`, `padding` (the zeros added before the first element of each
      spatial dimension), `dilation`, `output_padding` (one entry per spatial
      dimension), `transposed`.
    """

    # The spatial dimensions of the fixed-rank operators (`conv2d`: 2);
    # `None` where the rank of `weight` decides.
    spatial_dims: int | None = None
    # Whether an input without a batch dimension is accepted (as
    # `torch.nn.functional.conv2d` accepts ``(C, H, W)``).
    allow_unbatched = False

    def __init__(self, args) -> None:
        super().__init__(args)
        self.resolve(args)

    def resolve(self, args) -> None:
        """Checks the arguments and resolves the geometry (above); every
        member of the family names them alike, and only `convolution` has
        `transposed` and `output_padding`."""
        stride, padding, dilation = args.stride, args.padding, args.dilation
        groups = args.groups
        transposed = getattr(args, "transposed", False)
        output_padding = getattr(args, "output_padding", None)
        input, weight, bias, out = args.input, args.weight, args.bias, args.out
        self.require_dtype("input", input, CONVOLUTION_DTYPES)
        self.require_same_dtype(
            "input", {"input": input, "weight": weight, "bias": bias, "out": out}
        )
        dims = self.spatial_dims
        if dims is None:
            dims = weight.ndim - 2
            if dims not in (1, 2, 3):
                raise self.error(
                    f"`weight` must have 3, 4 or 5 dimensions (1 to 3 spatial "
                    f"dimensions), got shape {weight.shape}."
                )
        else:
            self.require_ndim("weight", weight, (dims + 2,))
        ranks = (dims + 1, dims + 2) if self.allow_unbatched else (dims + 2,)
        self.require_ndim("input", input, ranks)
        self.batched = input.ndim == dims + 2
        self.spatial_dims = dims
        if groups <= 0:
            raise self.error(f"`groups` must be positive, got {groups}.")
        self.groups = groups
        self.stride = self._per_dim("stride", stride, minimum=1)
        self.dilation = self._per_dim("dilation", dilation, minimum=1)
        self.transposed = bool(transposed)
        self.output_padding = (
            (0,) * dims
            if output_padding is None
            else self._per_dim("output_padding", output_padding, minimum=0)
        )

        input_shape = tuple(input.shape) if self.batched else (1, *input.shape)
        self.batch, self.in_channels = input_shape[:2]
        self.input_size = input_shape[2:]
        self.kernel_size = tuple(weight.shape[2:])
        if self.in_channels % groups:
            raise self.error(
                f"the {self.in_channels} channels of `input` {input.shape} must be "
                f"divisible by `groups` = {groups}."
            )
        if transposed:
            if weight.shape[0] != self.in_channels:
                raise self.error(
                    f"`weight` {weight.shape} of a transposed convolution must "
                    f"have as many rows as `input` {input.shape} has channels: "
                    f"{self.in_channels}."
                )
            self.out_channels = weight.shape[1] * groups
        else:
            if weight.shape[0] % groups:
                raise self.error(
                    f"the {weight.shape[0]} output channels of `weight` must be "
                    f"divisible by `groups` = {groups}."
                )
            if weight.shape[1] * groups != self.in_channels:
                raise self.error(
                    f"`weight` {weight.shape} with `groups` = {groups} expects "
                    f"{weight.shape[1] * groups} channels of `input`, got "
                    f"{self.in_channels} ({input.shape})."
                )
            self.out_channels = weight.shape[0]

        self.padding = self._resolve_padding(padding)
        if transposed:
            for index, (extra, step, spread) in enumerate(
                zip(self.output_padding, self.stride, self.dilation, strict=True)
            ):
                if extra >= max(step, spread):
                    raise self.error(
                        f"`output_padding` {list(self.output_padding)} must be "
                        f"smaller than `stride` or `dilation` in every "
                        f"dimension (dimension {index})."
                    )
            size = tuple(
                (n - 1) * s - 2 * p + d * (k - 1) + e + 1
                for n, s, p, d, k, e in zip(
                    self.input_size,
                    self.stride,
                    self.padding,
                    self.dilation,
                    self.kernel_size,
                    self.output_padding,
                    strict=True,
                )
            )
        else:
            size = tuple(
                (n + 2 * p - d * (k - 1) - 1) // s + 1
                if n + 2 * p - d * (k - 1) - 1 >= 0
                else 0
                for n, s, p, d, k in zip(
                    self.input_size,
                    self.stride,
                    self.padding,
                    self.dilation,
                    self.kernel_size,
                    strict=True,
                )
            )
            if self._same:
                size = tuple(self.input_size)
        if any(n <= 0 for n in size):
            raise self.error(
                f"the output size {list(size)} computed from `input` {input.shape}, "
                f"`weight` {weight.shape}, `stride`, `padding` and `dilation` "
                f"must be positive (the kernel is larger than the padded input)."
            )
        self.output_size = size

        if bias is not None:
            self.require_shape(
                "bias", bias, (self.out_channels,), "(one value per output channel)"
            )
        expected = (self.batch, self.out_channels, *size)
        self.require_shape("out", out, expected if self.batched else expected[1:])
        self.require_writable("out", out)

    _same = False

    def _resolve_padding(self, padding) -> tuple[int, ...]:
        dims = self.spatial_dims
        if isinstance(padding, str):
            if padding == "valid":
                return (0,) * dims
            if padding != "same":
                raise self.error(
                    f"`padding` must be 'valid', 'same' or a list of integers, got "
                    f"{padding!r}."
                )
            if any(s != 1 for s in self.stride):
                raise self.error(
                    f"`padding` 'same' is not supported with `stride` "
                    f"{list(self.stride)} (PyTorch allows it with stride 1 only)."
                )
            self._same = True
            # PyTorch puts the odd zero of an odd total after the input: the
            # first element sees half (rounded down) of it.
            return tuple(
                d * (k - 1) // 2
                for d, k in zip(self.dilation, self.kernel_size, strict=True)
            )
        return self._per_dim("padding", padding, minimum=0)

    def _per_dim(self, name: str, values, minimum: int) -> tuple[int, ...]:
        dims = self.spatial_dims
        values = tuple(values)
        if len(values) == 1:
            values = values * dims
        if len(values) != dims:
            count = "1 entry" if dims == 1 else f"1 or {dims} entries"
            raise self.error(
                f"`{name}` must have {count} (one per spatial dimension or one "
                f"for all), got {list(values)}."
            )
        if any(value < minimum for value in values):
            bound = "positive" if minimum == 1 else "non-negative"
            raise self.error(f"`{name}` must be {bound}, got {list(values)}.")
        return values
