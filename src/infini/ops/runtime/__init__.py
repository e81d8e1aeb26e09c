"""Launch runtimes shared by backends.

A backend (`native/cuda`, `triton`, `ninetoothed`) plans and launches its
kernels through the runtime of its kernel language, so that backends never
import each other. A runtime imports its kernel language and, from this
project, only `infini.ops.core`.

- `triton.py`: binding and launching `@triton.jit` kernels on CUDA-like
  devices (and under Triton's interpreter), plus the planning helpers every
  Triton launch needs (overlap guards, staging buffers, block sizes).
"""
