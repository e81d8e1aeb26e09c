"""`embedding`: ``out = weight[input]``, as `torch.nn.functional.embedding`."""

from __future__ import annotations

from infini.ops.core.operator import Operator

from ._indexing import INDEX_DTYPES, VALUE_DTYPES, check_index_range


class Embedding(Operator):
    """``out[...] = weight[input[...]]``: `torch.nn.functional.embedding`.

    - `input` holds indices (int32 or int64, any shape and strides), each in
      ``[0, num_embeddings)``; `weight` is ``(num_embeddings, dim)``; `out`
      is ``input.shape + (dim,)`` with `weight`'s dtype.
    - `max_norm` (first overload): before the lookup, every row of `weight`
      that `input` selects and whose `norm_type`-norm exceeds `max_norm` is
      scaled **in place** by ``max_norm / (norm + 1e-7)``, as torch's
      `embedding_renorm_` does (the norm and the scale rounded to `weight`'s
      dtype, their product in float32). `weight` must then be writable.
    - `padding_idx`, `scale_grad_by_freq` and `sparse` only affect gradients;
      `padding_idx` must lie in ``[-num_embeddings, num_embeddings)`` (the
      legacy overload also accepts -1, meaning none). The short overload is
      the plain lookup.
    - float32, float16 and bfloat16 weights; rows are copied exactly.
    """

    name = "embedding"
    trace_name = "Embedding"
    overloads = (
        "input: Tensor, weight: Tensor, padding_idx: int|None, "
        "max_norm: float|None, norm_type: float, scale_grad_by_freq: bool, "
        "sparse: bool, out: Tensor!",
        "input: Tensor, weight: Tensor, padding_idx: int, scale_grad_by_freq: bool, "
        "sparse: bool, out: Tensor!",
        "input: Tensor, weight: Tensor, out: Tensor!",
    )
    defaults = {
        "padding_idx": None,
        "max_norm": None,
        "norm_type": 2.0,
        "scale_grad_by_freq": False,
        "sparse": False,
    }

    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        self.require_dtype("input", input, INDEX_DTYPES)
        self.require_dtype("weight", weight, VALUE_DTYPES)
        self.require_same_dtype("weight", {"weight": weight, "out": out})
        self.require_ndim("weight", weight, (2,))
        self.num_embeddings, dim = weight.shape
        self.require_shape(
            "out", out, input.shape + (dim,), "(the shape of `input` plus `dim`)"
        )
        self.require_writable("out", out)
        padding_idx = args.padding_idx
        count = self.num_embeddings
        legacy_none = args.overload_index == 1 and padding_idx == -1
        if padding_idx is not None and not legacy_none:
            if not -count <= padding_idx < count:
                raise self.error(
                    f"`padding_idx` must be in [{-count}, {count}) for a `weight` "
                    f"of {count} rows, got {padding_idx}."
                )
        self.max_norm = args.max_norm
        self.norm_type = args.norm_type
        if self.max_norm is not None:
            self.require_writable("weight", weight)

    def check_indices(self, input) -> None:
        """Raises unless every index selects a row of `weight` (for
        implementations that do not check inside their kernel)."""
        check_index_range(
            self, "input", input, 0, self.num_embeddings, "the rows of `weight`"
        )
