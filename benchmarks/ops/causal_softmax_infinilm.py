import infini.ops
from benchmarks.ops import causal_softmax


def cases(tokens, dtype):
    return causal_softmax.cases(tokens, dtype, infini.ops.causal_softmax_infinilm)
