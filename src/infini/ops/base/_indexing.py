"""Validation shared by the bases of operators that index with tensors
(embedding lookups, rotary position tables, KV-cache slots).

Index ranges depend on data, so they are checked when an operator runs, not
when it is built. Implementations that scan the indices themselves (the CPU
kernels do it in the same pass that uses them) report a bad one with
`index_error`; the others call `check_index_range`, which scans with torch.
"""

from __future__ import annotations

from infini.ops.core.operator import Operator

INDEX_DTYPES = ("int32", "int64")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")


def index_error(
    operator: Operator,
    parameter: str,
    position: tuple[int, ...],
    value: int,
    low: int,
    high: int,
    what: str = "",
):
    """The `ValueError` for the index `value` at `position` of `parameter`,
    which had to lie in ``[low, high)``; `what` says what the range is."""
    where = ", ".join(str(int(i)) for i in position)
    reason = f" ({what})" if what else ""
    return operator.error(
        f"`{parameter}[{where}]` is {int(value)}, out of the range "
        f"[{low}, {high}){reason}; nothing was written."
    )


def check_index_range(
    operator: Operator,
    parameter: str,
    tensor,
    low: int,
    high: int,
    what: str = "",
    skip_negative: bool = False,
) -> None:
    """Raises `index_error` for the first element of `tensor` outside
    ``[low, high)`` (negative elements are allowed when `skip_negative`)."""
    if tensor.numel() == 0:
        return
    bad = tensor >= high
    if not skip_negative:
        bad |= tensor < low
    if bool(bad.any()):
        position = tuple(int(i) for i in bad.nonzero()[0].tolist())
        value = int(tensor[position]) if position else int(tensor)
        raise index_error(operator, parameter, position, value, low, high, what)


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The multi-index of row-major position `flat` in `shape`."""
    position = []
    for size in reversed(shape):
        position.append(flat % size if size else 0)
        flat //= size if size else 1
    return tuple(reversed(position))
