"""The NineToothed backend (slot 9, NVIDIA; `WITH_NINETOOTHED=ON`).

Each operator module under `ops/` holds an *arrangement* (how its tensors
are tiled into the blocks one program handles) and an *application* (what a
program computes), written with the `ninetoothed` package, and its
implementation class. What they share:

- `generation.py`: NineToothed's code generator run without a device, the
  generated source adapted to our launch path, generated once per process
  and cached on disk;
- `cache.py`: the cache directory and atomic writes;
- `launch.py`: binding a generated kernel once per geometry through
  `infini.ops.runtime.triton`, the launch runtime of the native Triton
  kernels;
- `language.py`: the `@triton.jit` helpers applications call (upcasting
  16-bit floats, rounding on the store, float64 activations), copied into
  every generated source;
- `elementwise.py` and `rows.py`: the arrangements shared by elementwise
  operators (flattened blocks) and by row operators (one row per program,
  walked in blocks), with their planning;
- `aot.py`: the ahead-of-time default instantiations of every kernel
  (`scripts/generate_ninetoothed.py`).

Operators: `rms_norm`, `add`, `mul`, `silu`, `swiglu`, `silu_and_mul`,
`gelu`, `softmax`, `causal_softmax`, `rotary_embedding`, `gemm`,
`scaled_dot_product_attention`. Each accepts everything its base accepts,
except what `scaled_dot_product_attention` refuses at slot 9 with a
`ValueError` before any write: ``0 < dropout_p < 1``, ``E = 0`` and key and
value head groups that do not divide one another.
"""
