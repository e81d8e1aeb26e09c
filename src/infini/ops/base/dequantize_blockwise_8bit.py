"""`dequantize_blockwise_8bit`: unpack blockwise 8-bit quantised values (a
256-entry code book and one scale per block, as bitsandbytes stores them)."""

from __future__ import annotations

from infini.ops.core.operator import Operator

DEQUANTIZE_BLOCKWISE_8BIT_DTYPES = ("float32", "float16", "bfloat16")


class DequantizeBlockwise8bit(Operator):
    """``out.flatten()[i] = code[input.flatten()[i]] * absmax[i // blocksize]``.

    - `input` is uint8, packed (contiguous), any shape; `out` has its shape.
    - `code` is float32 with 256 entries (bitsandbytes' dynamic map, or any
      other code book).
    - `absmax` is float32, packed, one scale per block of `blocksize`
      consecutive elements: ``ceil(input.numel() / blocksize)``.
    - `blocksize` is positive.
    - `out` is float32, float16 or bfloat16, packed. Products are computed in
      float32 and rounded once.
    """

    name = "dequantize_blockwise_8bit"
    trace_name = "DequantizeBlockwise8bit"
    overloads = (
        "input: Tensor, absmax: Tensor, code: Tensor, blocksize: int, out: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        input, absmax, code, out = args.input, args.absmax, args.code, args.out
        self.require_dtype("input", input, ("uint8",))
        self.require_dtype("absmax", absmax, ("float32",))
        self.require_dtype("code", code, ("float32",))
        self.require_dtype("out", out, DEQUANTIZE_BLOCKWISE_8BIT_DTYPES)
        self.require_shape("code", code, (256,), "(one value per byte)")
        self.require_shape("out", out, input.shape, "(the shape of `input`)")
        blocksize = args.blocksize
        if blocksize <= 0:
            raise self.error(f"`blocksize` must be positive, got {blocksize}.")
        blocks = -(-input.numel // blocksize)
        if absmax.numel != blocks:
            raise self.error(
                f"`absmax` must hold one scale per block of {blocksize} elements "
                f"of `input`: {blocks}, got shape {absmax.shape}."
            )
        for name, meta in (
            ("input", input),
            ("absmax", absmax),
            ("code", code),
            ("out", out),
        ):
            if not meta.is_contiguous():
                raise self.error(
                    f"`{name}` must be packed (contiguous), got shape {meta.shape} "
                    f"and strides {meta.strides}."
                )
        self.blocksize = blocksize
        self.elements = input.numel
