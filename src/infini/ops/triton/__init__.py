"""The Triton JIT backend (slot 10, NVIDIA; `WITH_TRITON=ON`).

Each operator with a Triton JIT implementation has `ops/<op>/jit.py`: one
`@triton.jit` kernel (self-contained: it calls no other Triton function, so
the backend can compile it even while the interpreter test mode is on) and
its implementation class. `jit/` holds what they share:

- `config.py`: the `config=` schema of contract 5.1 and its validation;
- `compile.py`: signatures, identities, compilation and loading;
- `cache.py`: the on-disk cache of compiled kernels and auto-tuning results;
- `autotune.py`: benchmarking candidate configs;
- `operator.py`: `TritonJitOperator`, the build and launch steps every
  Triton JIT implementation shares.
"""
