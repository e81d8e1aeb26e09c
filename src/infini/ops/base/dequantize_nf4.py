"""`dequantize_nf4`: unpack blockwise NF4-quantised weights (QLoRA's 4-bit
NormalFloat, as bitsandbytes stores them) into floats."""

from __future__ import annotations

from infini.ops.core.operator import Operator

# The 16 NF4 levels: quantiles of a standard normal distribution scaled to
# [-1, 1], with an exact zero (QLoRA, Dettmers et al. 2023).
NF4_LEVELS = (
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)

DEQUANTIZE_NF4_DTYPES = ("float32", "float16", "bfloat16")


class DequantizeNf4(Operator):
    """``out.flatten()[i] = NF4[code(i)] * absmax[i // blocksize]``, where
    element ``2j`` of `out` (row-major) takes the high four bits of byte
    ``j`` of `input` and element ``2j + 1`` the low four bits.

    - `input` is uint8, packed (contiguous), with half as many elements as
      `out` (any shape, typically ``(rows, cols / 2)``).
    - `absmax` is float32, packed, one scale per block of `blocksize`
      consecutive elements of `out`: ``ceil(out.numel() / blocksize)``.
    - `blocksize` is positive and even (a byte never spans two blocks).
    - `out` is float32, float16 or bfloat16, packed (it is a weight matrix
      being unpacked), with an even number of elements. Products are
      computed in float32 and rounded once.
    - Inference engines keep weights quantised this way (bitsandbytes,
      QLoRA); the linked bitsandbytes provider takes the same arguments.
    """

    name = "dequantize_nf4"
    trace_name = "DequantizeNf4"
    overloads = ("input: Tensor, absmax: Tensor, blocksize: int, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, absmax, out = args.input, args.absmax, args.out
        self.require_dtype("input", input, ("uint8",))
        self.require_dtype("absmax", absmax, ("float32",))
        self.require_dtype("out", out, DEQUANTIZE_NF4_DTYPES)
        blocksize = args.blocksize
        if blocksize <= 0 or blocksize % 2:
            raise self.error(f"`blocksize` must be positive and even, got {blocksize}.")
        if out.numel % 2:
            raise self.error(
                f"`out` must have an even number of elements (two per byte of "
                f"`input`), got shape {out.shape}."
            )
        if input.numel * 2 != out.numel:
            raise self.error(
                f"`input` must hold half as many elements as `out` (two 4-bit "
                f"codes per byte): {out.numel // 2}, got shape {input.shape}."
            )
        blocks = -(-out.numel // blocksize)
        if absmax.numel != blocks:
            raise self.error(
                f"`absmax` must hold one scale per block of {blocksize} elements "
                f"of `out`: {blocks}, got shape {absmax.shape}."
            )
        for name, meta in (("input", input), ("absmax", absmax), ("out", out)):
            if not meta.is_contiguous():
                raise self.error(
                    f"`{name}` must be packed (contiguous), got shape {meta.shape} "
                    f"and strides {meta.strides}."
                )
        self.blocksize = blocksize
        self.elements = out.numel
