"""Matrix products on the CPU through the BLAS torch links (`matmul_into`),
on NumPy arrays over the caller's memory.

Operands arrive as data addresses with shapes and strides (in elements);
`HostView` turns one into a NumPy array over the caller's memory without a
copy, keeping every stride (stride-0 broadcasts and transposes included).
`MatmulPlan` then runs ``out = alpha * (a @ b) + bias`` in float32 (float64
for float64 tensors): 16-bit floats are widened first and the result is
rounded back once, to nearest even. At most `WEIGHT_ROWS_MAX` rows times a
weight with unit stride along the reduction (`linear`'s weight) run the
weight-rows kernel instead (`weight_rows.py`: the weight read once in its
own dtype; straight on the caller's memory when the rows and the output
share a dtype and there is no scale or bias). On a CPU with 16-bit matrix
instructions (`has_sixteen_bit_instructions`), a larger 16-bit product
without scale or bias runs torch's own 16-bit matmul (float32
accumulation, rounded once), which reads the weight as it is. The product
goes straight into the caller's output when that is safe (a float32/float64
output that overlaps no input and that BLAS can write); otherwise into a
buffer that is copied into the output afterwards, so an output may alias
its inputs.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from infini.ops.core.geometry import span

from .weight_rows import BFLOAT16_MAX_ROWS, WeightRowsPlan
from .weight_rows import MAX_ROWS as WEIGHT_ROWS_MAX

# The NumPy type a tensor's memory is viewed as: bfloat16 has no NumPy type
# and is viewed as its `uint16` bit pattern.
_VIEW_TYPES = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(np.uint16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}
MATMUL_DTYPES = tuple(_VIEW_TYPES)


def compute_type(dtype: str) -> np.dtype:
    """The type products are computed in: float64 for float64, else float32."""
    return np.dtype(np.float64 if dtype == "float64" else np.float32)


class _Interface:
    """Exposes caller memory to NumPy through the array interface protocol."""

    __slots__ = ("__array_interface__",)

    def __init__(self, interface: dict) -> None:
        self.__array_interface__ = interface


class HostView:
    """Builds NumPy views of one operand's memory from its address."""

    def __init__(self, shape, strides, dtype: str) -> None:
        self.dtype = dtype
        self.view_type = _VIEW_TYPES[dtype]
        itemsize = self.view_type.itemsize
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.byte_strides = tuple(stride * itemsize for stride in strides)
        self.nbytes = span(shape, strides) * itemsize
        self.empty = self.nbytes == 0
        self._template = {
            "shape": self.shape,
            "typestr": self.view_type.str,
            "strides": self.byte_strides,
            "version": 3,
        }

    def raw(self, address: int) -> np.ndarray:
        """The caller's memory as an array of the storage type (writable)."""
        if self.empty:
            return np.empty(self.shape, self.view_type)
        interface = dict(self._template)
        interface["data"] = (address, False)
        return np.asarray(_Interface(interface))

    def load(self, address: int, target: np.dtype) -> np.ndarray:
        """The values as `target` (float32/float64): a view when no
        conversion is needed, else a converted copy."""
        array = self.raw(address)
        if self.dtype == "bfloat16":
            return bfloat16_to_float32(array).astype(target, copy=False)
        return array.astype(target, copy=False)

    def overlaps(self, address: int, other: HostView, other_address: int) -> bool:
        if self.empty or other.empty:
            return False
        return (
            address < other_address + other.nbytes
            and other_address < address + self.nbytes
        )


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Rounds float32 values to bfloat16 bit patterns, to nearest even,
    keeping NaNs quiet (as torch does)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    result = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        quiet = ((bits >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
        result = np.where(nan, quiet, result)
    return result


def store(view: HostView, address: int, values: np.ndarray) -> None:
    """Writes float32/float64 `values` into the operand, rounding to nearest
    even for 16-bit floats."""
    target = view.raw(address)
    if view.dtype == "bfloat16":
        values = float32_to_bfloat16(values)
    np.copyto(target, values, casting="unsafe")


@cache
def has_sixteen_bit_instructions(dtype: str) -> bool:
    """Whether this CPU multiplies `dtype` ("bfloat16" or "float16")
    matrices natively: AVX-512 BF16/FP16 or AMX (as torch detects them)."""
    import torch

    try:
        capability = torch._C._cpu._get_cpu_capability()
    except (AttributeError, RuntimeError):  # Another torch: assume not.
        return False
    names = {
        "bfloat16": ("avx512_bf16", "amx_bf16"),
        "float16": ("avx512_fp16", "amx_fp16"),
    }[dtype]
    return any(capability.get(name) for name in names)


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b`` (NumPy's matmul semantics, float32 or float64)
    through the BLAS torch links (MKL/oneDNN) rather than NumPy's OpenBLAS.

    Why: torch's BLAS runs on the OpenMP thread pool the Numba kernels run
    on (torch loads the process's `libgomp`), while OpenBLAS keeps a pool of
    its own. On a small machine the two pools' idle threads spin against
    each other at every hand-over between a product and the Numba kernel
    after it: milliseconds each (a SmolLM2 prefill of 512 tokens on two
    cores: 238 tokens/s with OpenBLAS, 1205 with this)."""
    if (
        a.ndim < 2
        or b.ndim < 2
        or not (a.flags.writeable and b.flags.writeable and out.flags.writeable)
    ):
        # 1-D operands (NumPy drops their dimension from the result, torch
        # does not) and read-only arrays (torch wraps only writable ones).
        np.matmul(a, b, out=out)
        return
    import torch

    first, second, target = (
        torch.from_numpy(a),
        torch.from_numpy(b),
        torch.from_numpy(out),
    )
    if a.shape[:-2] == b.shape[:-2] == out.shape[:-2]:
        # Plain matrices or one shared batch: nothing to broadcast or fold.
        torch.matmul(first, second, out=target)
    else:
        tensor_matmul_into(first, second, target)


def tensor_matmul_into(first, second, target) -> None:
    """``target[...] = first @ second`` for torch tensors of at least two
    dimensions over the caller's memory (`matmul_into`'s layouts)."""
    import torch

    # torch resizes an `out` whose shape is not the product's (a batch of 1,
    # or a 2-D operand, shared by every batch of `out`) instead of
    # broadcasting into it: broadcast the operands to `out`'s batch first.
    # The checks cost a few microseconds only where a batch is involved:
    # plain matrix products and same-batch ones go straight to torch.
    if target.dim() > 2:
        batch = target.shape[:-2]
        folded = second.dim() == 2
        if (first.dim() > 2 or folded) and first.shape[:-2] != batch:
            first = first.expand(*batch, *first.shape[-2:])
        if not folded and second.shape[:-2] != batch:
            second = second.expand(*batch, *second.shape[-2:])
        # A batched `first` times a matrix is folded into one matrix
        # product, with `out` viewed the same way: torch cannot view an
        # `out` whose leading dimensions do not merge, so that one is
        # written from a result.
        if (
            folded
            and merge_leading(tuple(target.shape), tuple(target.stride())) is None
        ):
            target.copy_(torch.matmul(first, second))
            return
    torch.matmul(first, second, out=target)


def _blas_writable(view: HostView) -> bool:
    """Whether NumPy's matmul can hand this output to BLAS directly: the last
    dimension unit-stride and rows not overlapping (else NumPy falls back to
    a slow loop or the writes would collide)."""
    if len(view.shape) < 2 or view.empty:
        return False
    rows, cols = view.shape[-2:]
    row_stride, col_stride = view.strides[-2:]
    return (col_stride == 1 or cols == 1) and (row_stride >= cols or rows == 1)


def _blas_readable(array: np.ndarray) -> np.ndarray:
    """`array` itself when BLAS can read each matrix in place (one dimension
    unit-stride, as a plain or transposed matrix), else a contiguous copy:
    NumPy's matmul would otherwise use its slow generic loop."""
    if array.ndim < 2:
        return array
    itemsize = array.itemsize
    rows, cols = array.shape[-2:]
    row_stride, col_stride = array.strides[-2:]
    if (col_stride == itemsize or cols == 1) and row_stride >= cols * itemsize:
        return array
    if (row_stride == itemsize or rows == 1) and col_stride >= rows * itemsize:
        return array
    if rows <= 1 or cols <= 1:
        return array
    return np.ascontiguousarray(array)


class MatmulPlan:
    """``out = alpha * (a @ b) [+ bias]`` with NumPy matmul semantics for
    `a`, `b` and `out` (views given as `HostView`s; leading dimensions
    broadcast, 1-D operands are promoted), `bias` broadcast to `out`."""

    def __init__(
        self,
        a: HostView,
        b: HostView,
        out: HostView,
        *,
        alpha: float = 1.0,
        bias: HostView | None = None,
    ) -> None:
        self.a, self.b, self.out, self.bias = a, b, out, bias
        self.alpha = alpha
        self.compute = compute_type(out.dtype)
        # (view, position in the `run` addresses) of every input.
        self.inputs = [
            (view, position)
            for position, view in enumerate((a, b, bias))
            if view is not None
        ]
        native = out.dtype in ("float32", "float64")
        self.out_writable = _blas_writable(out)
        self.direct = native and self.out_writable
        self.numel = int(np.prod(out.shape, dtype=np.int64))
        # `k == 0`: the product is all zeros (plus the bias); the inputs are
        # empty and never read.
        self.reduction_empty = a.empty or b.empty
        # A 16-bit weight seen transposed (`linear`'s ``weight.T``, unit
        # stride along `k`) times a few rows: read the weight as it is
        # instead of widening all of it to float32 on every call.
        # So does a float32 weight times 1 to 32 rows: BLAS packs all of the
        # weight on every call, which costs more than the product itself;
        # and even one row (BLAS's matrix-vector path) is kept off BLAS:
        # its threads spin after each call and starve the Numba kernels
        # that follow (a decode step alternates the two), measured 5 ms
        # per such hand-over on two cores.
        narrow = out.dtype in ("bfloat16", "float16")
        float32_rows = out.dtype == "float32" and len(a.shape) == 2
        most_rows = WEIGHT_ROWS_MAX
        if out.dtype == "bfloat16" and has_sixteen_bit_instructions("bfloat16"):
            most_rows = BFLOAT16_MAX_ROWS
        self.narrow_weight = (
            (narrow or float32_rows)
            and len(a.shape) == 2
            and len(b.shape) == 2
            and len(out.shape) == 2
            and a.shape[0] <= most_rows
            and b.strides[0] == 1
            and not self.reduction_empty
        )
        # A narrow-weight product whose rows and output are of one dtype,
        # with no scale or bias, runs straight on the caller's memory; the
        # others (and a weight that overlaps the output) are staged in
        # float32 (`_staged_rows`, built on first use).
        self.weight_rows = None
        self.staged_rows = None
        if (
            self.narrow_weight
            and a.dtype == out.dtype
            and alpha == 1.0
            and bias is None
            and self.out_writable
            and (a.strides[1] == 1 or a.shape[1] == 1)
        ):
            self.weight_rows = WeightRowsPlan(
                b.dtype,
                out.dtype,
                *self._weight_rows_geometry(),
                (b.strides[1], a.strides[0], out.strides[0]),
            )
        # On a CPU with 16-bit matrix instructions, other 16-bit products (a
        # prefill's rows) run torch's 16-bit matmul (oneDNN on those
        # instructions, float32 accumulation, one rounding) on the operands
        # as they are, instead of widening the weight to float32 on every
        # call. Without them, oneDNN emulates and widening is several times
        # faster (AVX2 only: bfloat16 prefill at 0.16x float32). A scale or
        # a bias would be a second rounding there: those widen.
        self.sixteen_bit = (
            narrow
            and has_sixteen_bit_instructions(out.dtype)
            and a.dtype == b.dtype == out.dtype
            and alpha == 1.0
            and bias is None
            and len(a.shape) >= 2
            and len(b.shape) >= 2
            and not self.narrow_weight
            and not self.reduction_empty
        )

    def run(self, a_address: int, b_address: int, out_address: int, bias_address=0):
        if self.numel == 0:
            return
        out_view = self.out
        if self.reduction_empty:
            result = np.zeros(out_view.shape, self.compute)
        elif self.sixteen_bit:
            self._run_sixteen_bit(a_address, b_address, out_address)
            return
        elif self.narrow_weight:
            # The rows are widened into the kernel's scratch before any
            # result is written, so only the weight must lie apart.
            if self.weight_rows is not None and not self.out.overlaps(
                out_address, self.b, b_address
            ):
                self.weight_rows.launch(b_address, a_address, out_address)
                return
            a = np.ascontiguousarray(self.a.load(a_address, np.float32))
            result = np.empty(out_view.shape, np.float32)
            self._staged_rows().launch(b_address, a.ctypes.data, result.ctypes.data)
        else:
            a = _blas_readable(self.a.load(a_address, self.compute))
            b = _blas_readable(self.b.load(b_address, self.compute))
            addresses = (a_address, b_address, bias_address)
            if self.direct and self._out_apart(out_address, addresses):
                target = out_view.raw(out_address)
                matmul_into(a, b, target)
                self._finish(target, bias_address)
                return
            if a.ndim >= 2 and b.ndim >= 2:
                # torch's BLAS, not NumPy's OpenBLAS (see `matmul_into`).
                result = np.empty(out_view.shape, self.compute)
                matmul_into(a, b, result)
            else:
                # `asarray`: a 1-D by 1-D product is a NumPy scalar.
                result = np.asarray(np.matmul(a, b))
        self._finish(result, bias_address)
        store(out_view, out_address, result)

    def bind(self, a_address: int, b_address: int, out_address: int, bias_address=0):
        """`run` on these addresses as a callable of no arguments where it
        runs the weight-rows kernel straight on them, else `None`."""
        del bias_address  # A product with a bias takes no weight-rows kernel.
        if (
            self.numel == 0
            or self.reduction_empty
            or self.sixteen_bit
            or not self.narrow_weight
            or self.weight_rows is None
            or self.out.overlaps(out_address, self.b, b_address)
        ):
            return None
        return self.weight_rows.bind(b_address, a_address, out_address)

    def _weight_rows_geometry(self) -> tuple[int, int, int]:
        """``(tokens, columns, depth)`` of a narrow-weight product."""
        (tokens, depth), columns = self.a.shape, self.b.shape[1]
        return tokens, columns, depth

    def _staged_rows(self) -> WeightRowsPlan:
        """The narrow-weight product on float32 copies of the rows and the
        result (contiguous)."""
        if self.staged_rows is None:
            tokens, columns, depth = self._weight_rows_geometry()
            self.staged_rows = WeightRowsPlan(
                self.b.dtype,
                "float32",
                tokens,
                columns,
                depth,
                (self.b.strides[1], depth, columns),
            )
        return self.staged_rows

    def _run_sixteen_bit(self, a_address: int, b_address: int, out_address: int):
        import torch

        dtype = getattr(torch, self.out.dtype)

        def tensor(view: HostView, address: int):
            # bfloat16 memory is viewed as `uint16` bits, float16 as itself.
            return torch.from_numpy(view.raw(address)).view(dtype)

        first, second = tensor(self.a, a_address), tensor(self.b, b_address)
        if self.out_writable and self._out_apart(out_address, (a_address, b_address)):
            tensor_matmul_into(first, second, tensor(self.out, out_address))
        else:
            # An output that overlaps an input, or that BLAS cannot write
            # row by row: the product is staged.
            target = tensor(self.out, out_address)
            staged = torch.empty(target.shape, dtype=dtype)
            tensor_matmul_into(first, second, staged)
            target.copy_(staged)

    def _out_apart(self, out_address: int, addresses) -> bool:
        """Whether the output overlaps none of the inputs (`addresses` in
        the order of `a`, `b`, `bias`)."""
        return not any(
            self.out.overlaps(out_address, view, addresses[position])
            for view, position in self.inputs
        )

    def _finish(self, result: np.ndarray, bias_address: int) -> None:
        if self.alpha != 1.0:
            np.multiply(result, self.compute.type(self.alpha), out=result)
        if self.bias is not None and not self.bias.empty:
            np.add(result, self.bias.load(bias_address, self.compute), out=result)


def merge_leading(shape, strides):
    """``((rows, cols), (row_stride, col_stride))`` viewing a tensor of 3 or
    more dimensions as a matrix (all leading dimensions merged), or `None`
    when its layout does not allow that without a copy."""
    if len(shape) < 3:
        return None
    leading = [
        (size, stride)
        for size, stride in zip(shape[:-1], strides[:-1], strict=True)
        if size != 1
    ]
    rows = 1
    for size, _ in leading:
        rows *= size
    for (_, outer), (size, inner) in zip(leading, leading[1:], strict=False):
        if outer != inner * size:
            return None
    row_stride = leading[-1][1] if leading else shape[-1]
    return (rows, shape[-1]), (row_stride, strides[-1])
