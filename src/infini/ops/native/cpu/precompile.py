"""Compiling kernels ahead of the first call (`python -m infini.ops precompile`).

Unary and binary elementwise operators are precompiled by running them once
on small, large (parallel) and strided tensors of each commonly used dtype,
which compiles and caches on disk every kernel variant those calls reach.
"""

from __future__ import annotations

from .memory import streaming_outputs

# A parallel, contiguous shape built under `streaming_outputs` reaches the
# streaming kernels (used for outputs larger than the cache).
STREAMED_SHAPE = (256, 512)

# The dtypes whose kernels builds with GENERATE_OPERATOR_CALL_INSTANTIATIONS
# compile ahead; other dtypes compile on their first call.
PRECOMPILED_DTYPES = ("float32", "float16", "bfloat16")


def precompile_binary_elementwise(operator: str) -> int:
    """Runs `infini.ops.<operator>(input, other, out)` on every layout class
    the kernels distinguish; returns the number of calls made."""
    import torch

    import infini.ops

    function = getattr(infini.ops, operator)
    calls = 0
    for name in PRECOMPILED_DTYPES:
        dtype = getattr(torch, name)
        for shape, transpose in (((8,), False), ((512, 256), False), ((8, 8), True)):
            input = torch.zeros(shape, dtype=dtype)
            other = torch.zeros(shape, dtype=dtype)
            out = torch.empty(shape, dtype=dtype)
            if transpose:
                input = input.t()
                other = other.t()
                out = out.t()
            function(input, other, out, implementation_index=0)
            calls += 1
        input = torch.zeros(STREAMED_SHAPE, dtype=dtype)
        run_streamed(operator, input, input, torch.empty_like(input))
        calls += 1
    return calls


def precompile_unary_elementwise(operator: str, dtypes, *scalars) -> int:
    """Runs `infini.ops.<operator>(input, *scalars, out)` once per dtype on
    each layout class the unary kernels distinguish (small and large
    contiguous, strided), compiling and caching those kernels; returns the
    number of calls made."""
    import torch

    import infini.ops

    function = getattr(infini.ops, operator)
    calls = 0
    for name in dtypes:
        dtype = getattr(torch, name)
        for shape, transpose in (((8,), False), ((512, 256), False), ((8, 8), True)):
            input = torch.zeros(shape, dtype=dtype)
            out = torch.empty(shape, dtype=dtype)
            if transpose:
                input = input.t()
            function(input, *scalars, out, implementation_index=0)
            calls += 1
        input = torch.zeros(STREAMED_SHAPE, dtype=dtype)
        run_streamed(operator, input, *scalars, torch.empty_like(input))
        calls += 1
    return calls


def run_streamed(operator: str, *args) -> None:
    """Runs `infini.ops.<operator>(*args)` once through an operator built
    under `streaming_outputs`, which compiles the streaming kernels it may
    use. A class object, not the function: the operator is not cached, so
    later calls of this geometry get the regular kernels."""
    import infini.ops

    class_name = infini.ops._entries[operator].class_name
    with streaming_outputs():
        streamed = getattr(infini.ops, class_name)(*args)
    streamed(*args)


# The index dtypes operators accept for positions, slots, tables and ids:
# each is a different kernel signature or specialisation.
PRECOMPILED_INDEX_DTYPES = ("int32", "int64")


def torch_dtypes(names=PRECOMPILED_DTYPES) -> list:
    """The torch dtypes named in `names`."""
    import torch

    return [getattr(torch, name) for name in names]


def unary_layouts(input_dtype, out_dtype):
    """`(input, out)` pairs, zero-filled, reaching each of the six kernels of
    a `unary_kernels` family (`UnaryLaunch`): flat, strided and tiled (a
    transposed input), each serial (small) and parallel (large)."""
    import torch

    def pair(shape, view):
        input = torch.zeros(shape, dtype=input_dtype)
        input = view(input)
        return input, torch.empty(input.shape, dtype=out_dtype)

    def flat(x):
        return x

    def every_other_column(x):
        return x[:, ::2]

    def transposed(x):
        return x.t()

    return [
        pair((8,), flat),
        pair((512, 256), flat),
        pair((8, 8), every_other_column),
        pair((1024, 256), every_other_column),
        pair((64, 64), transposed),
        pair((512, 512), transposed),
    ]


def binary_layouts(dtype):
    """`(input, other, out)` triples, zero-filled, of one dtype reaching each
    kernel of `BinaryElementwise`: flat and strided, each serial (small) and
    parallel (large)."""
    import torch

    triples = []
    for shape, transpose in (
        ((8,), False),
        ((512, 256), False),
        ((8, 8), True),
        ((512, 256), True),
    ):
        input = torch.zeros(shape, dtype=dtype)
        other = torch.zeros(shape, dtype=dtype)
        out = torch.empty(shape, dtype=dtype)
        if transpose:
            input, other = input.t(), other.t()
            out = torch.empty(input.shape, dtype=dtype)
        triples.append((input, other, out))
    return triples


def index_dtypes() -> list:
    """The torch dtypes of `PRECOMPILED_INDEX_DTYPES`."""
    return torch_dtypes(PRECOMPILED_INDEX_DTYPES)


def precompile_gated_elementwise(operator: str) -> int:
    """Runs `infini.ops.<operator>(input, out)` of a gated activation once
    per dtype on the flat kernels (one token: both halves contiguous) and
    the strided ones (several tokens), each serial and parallel; returns
    the number of calls made."""
    import torch

    import infini.ops

    function = getattr(infini.ops, operator)
    calls = 0
    for dtype in torch_dtypes():
        for tokens, half in ((1, 8), (1, 1 << 17), (8, 8), (512, 256)):
            input = torch.zeros(tokens, 2 * half, dtype=dtype)
            out = torch.empty(tokens, half, dtype=dtype)
            function(input, out, implementation_index=0)
            calls += 1
    return calls
