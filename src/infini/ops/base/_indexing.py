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
# The value dtypes these operators support (float64 is left out, as on GPUs).
VALUE_DTYPES = ("float32", "float16", "bfloat16")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")


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


def slot_error(operator: Operator, position: int, value: int, slots: int):
    """The `ValueError` for a `slot_mapping` entry past the cache's slots."""
    return operator.error(
        f"`slot_mapping[{int(position)}]` is {int(value)}, but the cache has "
        f"{slots} slots (blocks x block size), so slots must be below {slots} "
        "(negative slots are skipped); nothing was written."
    )


def check_slots(operator: Operator, slot_mapping, slots: int) -> None:
    """Raises `slot_error` for the first slot at or past `slots` (for
    implementations that do not check inside their kernel)."""
    if slot_mapping.numel() == 0:
        return
    bad = (slot_mapping >= slots).nonzero()
    if len(bad):
        position = int(bad[0, 0])
        raise slot_error(operator, position, int(slot_mapping[position]), slots)


def check_kv_cache_dtype(operator: Operator, args, caches: dict) -> bool:
    """Validates `kv_cache_dtype` with the caches' and scales' dtypes;
    returns whether it is an fp8 mode."""
    mode = args.kv_cache_dtype
    if mode not in KV_CACHE_DTYPES:
        raise operator.error(
            f"`kv_cache_dtype` must be one of {', '.join(map(repr, KV_CACHE_DTYPES))}, "
            f"got {mode!r}."
        )
    key = args.key
    if mode == "auto":
        for name, meta in caches.items():
            if meta.dtype != key.dtype:
                raise operator.error(
                    f"`{name}` has dtype {meta.dtype} but `key` has dtype {key.dtype}; "
                    "with `kv_cache_dtype` 'auto' they must match."
                )
        return False
    for name, meta in caches.items():
        if meta.dtype != "uint8":
            raise operator.error(
                f"`{name}` has dtype {meta.dtype}; with `kv_cache_dtype` {mode!r} "
                "caches hold fp8 bytes and must be uint8."
            )
    for name in ("k_scale", "v_scale"):
        meta = getattr(args, name)
        if meta.dtype != "float32" or meta.numel != 1:
            raise operator.error(
                f"`{name}` must be a float32 tensor of one element with "
                f"`kv_cache_dtype` {mode!r}, got dtype {meta.dtype} and shape "
                f"{meta.shape}."
            )
    return True
