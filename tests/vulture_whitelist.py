"""Names the dead-code check cannot see used.

CI runs ``vulture src scripts benchmarks examples tests/vulture_whitelist.py
--min-confidence 60``; `[tool.vulture]` in `pyproject.toml` already skips what
a decorator registers (`@implementation` classes, Numba
`@overload`/`@intrinsic` functions, pytest fixtures) and parameters named
`unused`. What is left is used by name from outside the Python sources:
through the build manifest, by Numba or NumPy, or by callers of the public
surface. Each entry says who uses it. This file is read by vulture, never
imported.
"""

from types import SimpleNamespace

used = SimpleNamespace()

_ = [
    # The public profiling helpers every build of `infini.ops` exports (this
    # edition has no host-range profiler; they say so).
    used._host_range_profile_compiled,
    used._host_range_profile_start,
    used._host_range_profile_stop,
    used._host_range_profile_calibrate,
    used.iterations,
    # Operator bases served only by the generated ATen backend (slot 8): the
    # manifest names them and `core/dispatch.py` loads them by name.
    used.Argsort,
    used.BinaryCrossEntropy,
    used.Elu,
    used.HuberLoss,
    used.MseLoss,
    used.MultiMarginLoss,
    used.MultilabelMarginLoss,
    used.NllLoss,
    used.Searchsorted,
    used.SmoothL1Loss,
    used.SoftMarginLoss,
    used.SpecialRound,
    used.Tensordot,
    # Bases with no implementation in this repository's backends (every base
    # is bound; a call names the device without an implementation).
    used.MaxUnpool2d,
    used.MaxUnpool3d,
    # What the continuous-batching scheduler gives its callers
    # (`tests/test_model_llama.py` reads them per step).
    used.seq_id,
    used.last_logits,
    # The "no error" status code of the paged-attention index scans, named
    # beside the error codes it completes (the kernels return it as 0).
    used.INDEX_OK,
    # Where an implementation is registered: set by `@implementation` and by
    # the generated ATen classes, read by `tests/test_triton_native.py`.
    used.implementation_devices,
    # Numba's cache locator interface (`native/cpu/jit.py`): Numba calls these.
    used._py_file,
    used.get_cache_path,
    used.get_source_stamp,
    used.get_disambiguator,
    used._index_key,
    # Numba `@intrinsic` functions take the typing context first.
    used.typingctx,
    # NumPy reads `__array_interface__` to wrap raw memory (`native/cpu/blas.py`).
    used.__array_interface__,
    # NineToothed's code generator calls these overrides
    # (`ninetoothed/generation.py`).
    used._generate_autotune,
    used._generate_launch,
    # PEP 562 module attributes (`torch/aten.py` builds its classes on demand).
    used.__getattr__,
    used.__dir__,
    # `inspect.signature` reads it on the public functions and classes
    # (core/docs.py).
    used.__signature__,
    # inspect.Parameter's name, set for ATen names that are Python keywords
    # (core/docs.py).
    used._name,
    # A Triton knob that `triton.compile` reads (runtime/triton.py,
    # `compile_source`).
    used.always_compile,
]
