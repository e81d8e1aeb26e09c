"""Native kernels, one package per device family."""
