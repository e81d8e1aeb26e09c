"""`cat`: ``out = torch.cat(tensors, dim)``."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class Cat(Operator):
    """``out = torch.cat(tensors, dim)``: the tensors joined along `dim`.

    `dim` may be negative (counted from `out`'s last dimension). Every
    member has `out`'s dtype and number of dimensions and `out`'s sizes
    except along `dim`, where the sizes add up to `out`'s. As in torch, a
    1-D empty member (shape ``(0,)``) is skipped whatever `out`'s rank;
    other zero-size members take part like any other. Members may have any
    strides, including stride-0 (broadcast) dimensions; `out` must not
    broadcast. `out` may overlap members; results are as if every member
    were read first.
    """

    name = "cat"
    trace_name = "Cat"
    overloads = ("tensors: list[Tensor], dim: int, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        out = args.out
        ndim = out.ndim
        if ndim == 0:
            raise self.error(
                "`out` must have at least one dimension; zero-dimensional tensors "
                "cannot be concatenated."
            )
        if not -ndim <= args.dim < ndim:
            raise self.error(
                f"`dim` must be in the range [{-ndim}, {ndim - 1}] for `out` of "
                f"shape {out.shape}, got {args.dim}."
            )
        self.dim = dim = args.dim % ndim
        # `(index, meta)` of every member that takes part.
        self.members = []
        total = 0
        for index, meta in enumerate(args.tensors):
            name = f"tensors[{index}]"
            self.require_same_dtype("out", {"out": out, name: meta})
            if ndim != 1 and meta.shape == (0,):
                continue
            if meta.ndim != ndim:
                raise self.error(
                    f"`{name}` has {meta.ndim} dimensions but `out` has {ndim}; "
                    f"every member needs {ndim} (or shape (0,), which is skipped)."
                )
            expected = out.shape[:dim] + (meta.shape[dim],) + out.shape[dim + 1 :]
            if meta.shape != expected:
                raise self.error(
                    f"`{name}` has shape {meta.shape}, but concatenating into `out` "
                    f"of shape {out.shape} along dimension {dim} needs {expected}."
                )
            total += meta.shape[dim]
            self.members.append((index, meta))
        if not self.members:
            if out.shape != (0,):
                raise self.error(
                    "`out` must have shape (0,) when every member of `tensors` has "
                    f"shape (0,), got {out.shape}."
                )
        elif total != out.shape[dim]:
            raise self.error(
                f"`out` has size {out.shape[dim]} along dimension {dim}, but the "
                f"members' sizes there add up to {total}."
            )
        self.require_writable("out", out)
