"""The dispatch core: devices, dtypes, tensor metadata, overload binding,
operator bases, the per-thread operator cache and call tracing.

Nothing here imports a kernel library; kernels are imported lazily the first
time an operator is built for a device.
"""
