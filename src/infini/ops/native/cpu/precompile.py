"""Compiling kernels ahead of the first call (`python -m infini.ops precompile`).

Binary elementwise operators are precompiled by running them once on small,
large (parallel) and strided tensors of each commonly used dtype, which
compiles and caches on disk every kernel variant those calls reach.
"""

from __future__ import annotations

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
    return calls
