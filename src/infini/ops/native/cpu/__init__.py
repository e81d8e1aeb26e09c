"""CPU kernels written with Numba: one implementation per operator in
`ops/<op>.py`, and the families of kernels several operators share beside
them.

- `jit.py`: compiling kernels (`kernel`, `helper`) and their on-disk cache.
- `memory.py`: tensors as raw addresses (`element_array`), storage types,
  streaming stores.
- `numeric.py`: scalar conversions between 16-bit floats and float32.
- `dtype_io.py`: loading and storing elements of each dtype.
- `layout.py`: how elementwise kernels walk their operands (`ElementwisePlan`).
- `elementwise.py`: the unary and binary elementwise kernels and launches.
- `conversions.py`: dtype conversions and bit copies (`cast`, `copy`, ...).
- `fill.py`: storing one bit pattern everywhere (`fill`, `zeros_infinilm`).
- `activations.py`: the activation functions the elementwise kernels inline.
- `rows.py`: the driver of row kernels (normalisations, softmax).
- `norms.py`: the passes of the RMS normalisation rows.
- `softmax.py`: the row softmax of every softmax operator.
- `attention.py`, `kv_cache.py`, `rotary.py`, `routing.py`, `sampling.py`,
  `blas.py`, `codes.py`: the LLM inference families.
- `precompile.py`: compiling kernels ahead of the first call.
"""
