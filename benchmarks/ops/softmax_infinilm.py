import infini.ops
from benchmarks.ops import softmax


def cases(tokens, dtype):
    return softmax.cases(tokens, dtype, infini.ops.softmax_infinilm)
