"""The Triton kernels shared by the CUDA-like platforms.

Despite the folder's name (it mirrors the original's `src/native/cuda`),
nothing here is CUDA C: every kernel is a `@triton.jit` function, and one
source per operator (`ops/<op>.py`) serves every platform of
`infini.ops.core.devices.CUDA_LIKE_PLATFORMS`. Each operator module declares
one implementation at slot 0 with ``devices="cuda_like"``.

Kernels are bound and launched through `infini.ops.runtime.triton`, the
Triton launch runtime this backend shares with the Triton JIT backend:
`Kernel.bind` plans a launch once per geometry and the operator's `launch`
calls the bound `Launch` with the caller's tensors and stream (the compiled
kernel directly on NVIDIA GPUs, Triton's interpreter on CPU tensors under
`INFINI_OPS_TRITON_INTERPRET=1`). The modules beside `ops/`:

- `elementwise.py`: planning for elementwise kernels (broadcasting, dimension
  coalescing, the geometry table strided kernels read, overlap staging), the
  `@triton.jit` helpers that load, convert and store elements, and the
  unary, binary and gated templates (`UnaryElementwise`,
  `BinaryElementwise`, `GatedElementwise`), with which an elementwise
  operator is only its element function and its registration.
- `rows.py`: planning for kernels that run a tile of rows per program.
- `special.py`: `exp`, `sigmoid` and `erfc` built from exactly rounded
  operations, so that GPUs and the interpreter give the same results.

Adding an operator (contributor note):

1. An elementwise operator: write its element function as a `@triton.jit`
   function in `ops/<op>.py` and set ``self.launch`` to one of the
   templates in `__init__` (see `ops/silu.py`, `ops/add.py`).
2. Otherwise write the `@triton.jit` kernel in `ops/<op>.py` (runtime
   parameters first, `tl.constexpr` parameters last), upcasting 16-bit
   floats to float32 before any arithmetic and rounding once on the store.
   Plan in `__init__` (call `super().__init__(args)` and `require_device`
   first, then `Kernel(...).bind(...)`) and make `launch(self, stream,
   *tensors)` call the bound launch. Never autotune here: pick block sizes
   from the geometry. Handle outputs that overlap inputs (`OverlapGuard` and
   a staging buffer) and zero-size tensors (no launch).
3. Either way, decorate the class
   ``@implementation(operator="<op>", devices="cuda_like", slot=0)``.
4. The operator's `tests/test_<op>.py` covers the kernel on CPU when run with
   `INFINI_OPS_TRITON_INTERPRET=1` (README, "Testing GPU kernels on a CPU").
"""
