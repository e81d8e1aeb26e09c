import infini.ops
from benchmarks.ops import silu_and_mul


def cases(tokens, dtype):
    return silu_and_mul.cases(tokens, dtype, infini.ops.silu_and_mul_infinilm)
