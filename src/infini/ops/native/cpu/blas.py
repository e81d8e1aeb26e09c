"""Matrix products on the CPU through the BLAS torch links (`matmul_into`),
on NumPy arrays over the caller's memory.

Operands arrive as data addresses with shapes and strides (in elements);
`HostView` turns one into a NumPy array over the caller's memory without a
copy, keeping every stride (stride-0 broadcasts and transposes included).
`MatmulPlan` then runs ``out = alpha * (a @ b) + bias`` in float32 (float64
for float64 tensors): 16-bit floats are widened first and the result is
rounded back once, to nearest even. On a CPU with 16-bit matrix
instructions (`has_sixteen_bit_instructions`), a 16-bit product without
scale or bias that the narrow-weight kernel does not take runs torch's own
16-bit matmul instead (float32 accumulation, rounded once), which reads the
weight as it is. The product goes straight into the
caller's output when that is safe (a float32/float64 output that overlaps no
input and that BLAS can write); otherwise into a buffer that is copied into
the output afterwards, so an output may alias its inputs.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import prange

from infini.ops.core.geometry import span

from .jit import helper, kernel
from .numeric import bfloat16_bits_to_float32, float16_bits_to_float32

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


# At most this many rows of `a` take the 16-bit weight kernel: it streams
# the weight once in its own format, where BLAS would need a float32 copy of
# it on every call. Longer products amortise that copy over their rows and
# run faster in BLAS.
NARROW_WEIGHT_MAX_ROWS = 32


# Weight rows each task widens and multiplies: enough work per task to hide
# the scheduling, small enough to spread over the cores.
_NARROW_WEIGHT_COLUMNS_PER_TASK = 64


def _rows_times_row(convert):
    @helper
    def rows_times_row(a, source, out, column):
        """``out[:, column] = a @ convert(source)`` for float32 rows `a`
        ``(m, k)`` and one weight row `source` of `k` elements. Four rows
        per pass: one load of each weight element feeds four products."""
        rows, depth = a.shape
        full = rows - rows % 4
        for row in range(0, full, 4):
            total0 = total1 = total2 = total3 = np.float32(0.0)
            for index in range(depth):
                value = convert(source[index])
                total0 += a[row, index] * value
                total1 += a[row + 1, index] * value
                total2 += a[row + 2, index] * value
                total3 += a[row + 3, index] * value
            out[row, column] = total0
            out[row + 1, column] = total1
            out[row + 2, column] = total2
            out[row + 3, column] = total3
        for row in range(full, rows):
            total = np.float32(0.0)
            for index in range(depth):
                total += a[row, index] * convert(source[index])
            out[row, column] = total

    return rows_times_row


def _narrow_weight_rows(widen, direct_rows):
    """The product for a weight whose elements `widen` turns into float32.
    Up to `direct_rows` rows of `a` read the weight as it is, widening each
    element for every four rows; more rows widen each weight row once into
    a scratch row that all of them read."""
    direct = _rows_times_row(widen)
    scratched = _rows_times_row(_float32_as_is)

    def product(a, weight_bits, out):
        """``out = a @ weight.T`` for float32 `a` ``(m, k)`` and a weight
        ``(n, k)`` (16-bit bit patterns, or float32), accumulated in
        float32."""
        rows, depth = a.shape
        columns = weight_bits.shape[0]
        step = _NARROW_WEIGHT_COLUMNS_PER_TASK
        for task in prange((columns + step - 1) // step):
            last = min(columns, (task + 1) * step)
            if rows <= direct_rows:
                for column in range(task * step, last):
                    direct(a, weight_bits[column], out, column)
                continue
            scratch = np.empty(depth, np.float32)
            for column in range(task * step, last):
                for index in range(depth):
                    scratch[index] = widen(weight_bits[column, index])
                scratched(a, scratch, out, column)

    return kernel(product, parallel=True, fastmath={"reassoc", "contract"})


@helper
def _float32_as_is(value):
    return value


@cache
def narrow_weight_kernel(dtype: str):
    """The kernel multiplying float32 rows by a bfloat16, float16 or float32
    weight read in place (compiled on first use, cached on disk)."""
    # A float32 weight needs no widening: every row count reads it as it
    # is. A 16-bit one is widened once per four rows up to four rows (one
    # pass over the weight, as a decode step's few rows need), once per
    # weight row beyond.
    widen, direct_rows = {
        "bfloat16": (bfloat16_bits_to_float32, 4),
        "float16": (float16_bits_to_float32, 4),
        "float32": (_float32_as_is, NARROW_WEIGHT_MAX_ROWS),
    }[dtype]
    return _narrow_weight_rows(widen, direct_rows)


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
        self.narrow_weight = (
            (narrow or float32_rows)
            and len(a.shape) == 2
            and len(b.shape) == 2
            and len(out.shape) == 2
            and a.shape[0] <= NARROW_WEIGHT_MAX_ROWS
            and b.strides[0] == 1
            and not self.reduction_empty
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
            a = np.ascontiguousarray(self.a.load(a_address, self.compute))
            weight_bits = self.b.raw(b_address).T
            if self.b.dtype != "float32":
                weight_bits = weight_bits.view(np.uint16)
            result = np.empty(out_view.shape, self.compute)
            narrow_weight_kernel(self.b.dtype)(a, weight_bits, result)
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
