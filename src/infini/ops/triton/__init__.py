"""The Triton JIT backend (slot 10, NVIDIA; `WITH_TRITON=ON`).

Each operator with a Triton JIT implementation has `ops/<op>/jit.py`: one
`@triton.jit` kernel (self-contained: it calls no other Triton function, so
the backend can compile it even while the interpreter test mode is on) and
its implementation class. `jit/` holds what they share:

- `compile.py`: signatures, identities, compilation and loading;
- `cache.py`: the on-disk cache of compiled kernels and auto-tuning results;
- `operator.py`: `TritonJitOperator`, the build and launch steps every
  Triton JIT implementation shares, and auto-tuning (benchmarking the
  candidate configs of an auto-tuning `config=`).

The `config=` schema itself is `infini.ops.core.config` (it is checked
whatever the slot), and launches go through `infini.ops.runtime.triton`,
the launch runtime shared with the CUDA-like native kernels.
"""
