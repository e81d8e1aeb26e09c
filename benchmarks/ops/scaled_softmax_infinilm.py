import infini.ops
from benchmarks.ops import scaled_softmax


def cases(tokens, dtype):
    return scaled_softmax.cases(tokens, dtype, infini.ops.scaled_softmax_infinilm)
