"""CPU kernels written with Numba (`ops/<op>.py`) and their shared helpers."""
