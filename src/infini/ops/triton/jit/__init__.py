"""Configuration, compilation, caching and auto-tuning of Triton JIT kernels."""
