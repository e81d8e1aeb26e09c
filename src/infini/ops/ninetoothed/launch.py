"""Binding a generated NineToothed kernel once per geometry.

`bind_kernel` computes the kernel's runtime arguments and grid from the
operands' shapes and strides (`KernelSource.arguments`) and binds them with
`infini.ops.runtime.triton.Kernel`, the launch path of the native Triton
kernels: on NVIDIA the compiled kernel's launcher is called directly with
the data pointers, under `INFINI_OPS_TRITON_INTERPRET=1` Triton's
interpreter runs it on CPU tensors. The bound launch is called as
``launch(stream, *tensors)`` with the tensors in the order of the specs.
"""

from __future__ import annotations

from functools import cache

from infini.ops.runtime.triton import Kernel

from .generation import KernelSource


@cache
def _kernel(function) -> Kernel:
    return Kernel(function)


def tensor_operand(meta, shape=None, strides=None):
    """A tensor operand: its pointer marker (the `TensorMeta`) and the shape
    and strides the kernel sees (by default the tensor's own)."""
    return (
        meta,
        tuple(meta.shape if shape is None else shape),
        tuple(meta.strides if strides is None else strides),
    )


def bind_kernel(
    source: KernelSource, operands: dict, device, num_warps: int = 4, num_stages=3
):
    arguments, grid, constexprs = source.arguments(operands)
    return _kernel(source.function).bind(
        grid=grid,
        arguments=arguments,
        constexprs=constexprs,
        device=device,
        num_warps=num_warps,
        num_stages=num_stages,
    )
