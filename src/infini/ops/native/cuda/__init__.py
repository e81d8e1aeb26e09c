"""Native kernels of the CUDA-like platforms, written in Triton.

One source per operator (`ops/<op>.py`) serves every CUDA-like platform
(`nvidia`, `iluvatar`, `metax`, `moore`, `hygon`, `thead`): each kernel module
declares one implementation at slot 0 for all of them. The shared pieces:

- `runtime.py`: `Kernel` wraps a `@triton.jit` function; `Kernel.bind` plans a
  launch once per geometry (grid, scalar arguments, constexprs, warps) and
  returns a `Launch`, which the operator's `launch` calls with the caller's
  tensors and stream. On NVIDIA GPUs a `Launch` compiles the kernel when it is
  bound and calls the compiled kernel's launcher directly on the caller's
  stream, not `JITFunction.run`. Under `INFINI_OPS_TRITON_INTERPRET=1` (the
  CPU test mode) the same `Launch` runs the kernel through Triton's
  interpreter on CPU tensors.
- `elementwise.py`: planning for elementwise kernels (broadcasting, dimension
  coalescing, the geometry table strided kernels read, overlap staging) and
  the `@triton.jit` helpers that turn a linear index into element offsets.
- `rows.py`: planning for kernels that run a tile of rows per program.
- `special.py`: `exp`, `sigmoid` and `erfc` built from exactly rounded
  operations, so that GPUs and the interpreter give the same results.

Adding an operator (contributor note):

1. Write `ops/<op>.py`: the `@triton.jit` kernel (runtime parameters first,
   `tl.constexpr` parameters last), upcasting 16-bit floats to float32 before
   any arithmetic and rounding once on the store.
2. Subclass the operator's base, decorated
   ``@implementation(operator="<op>", devices=CUDA_LIKE, slot=0)`` with the
   tuple written out literally (the build reads it with `ast`). Plan in
   `__init__` (call `super().__init__(args)` first, then `KERNEL.bind(...)`)
   and make `launch(self, stream, *tensors)` call the bound launch. Never
   autotune here: pick block sizes from the geometry.
3. Handle outputs that overlap inputs (`elementwise.OverlapGuard` and a
   staging buffer) and zero-size tensors (no launch).
4. The operator's `tests/test_<op>.py` covers the kernel on CPU when run with
   `INFINI_OPS_TRITON_INTERPRET=1` (README, "Testing GPU kernels on a CPU").
"""
