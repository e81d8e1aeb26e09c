"""Elementwise kernels of the NineToothed backend: one arrangement for all.

Every tensor operand is broadcast to the output's shape (stride-0 views),
the dimensions are ordered by the output's strides and coalesced where every
operand allows it (`infini.ops.core.geometry.coalesce`), and the arrangement
flattens each operand and cuts it into blocks of ``block`` elements: program
``p`` handles elements ``p * block ...`` of every operand. An operator
supplies only its application, a function of the loaded blocks that assigns
`out`. The kernel is generated per number of coalesced dimensions (most
calls have one) and block size, and compiled per dtype.
"""

from __future__ import annotations

from infini.ops.core.geometry import broadcast_strides, coalesce
from infini.ops.core.streams import stream_context
from infini.ops.runtime.triton import (
    INTERPRETER,
    OverlapGuard,
    next_power_of_two,
    require_device,
    staging_like,
)

from .generation import TensorSpec, kernel_source
from .launch import bind_kernel, tensor_operand

GPU_BLOCK = 1024
INTERPRETER_BLOCK_LIMIT = 16384


def elementwise_arrangement(*operands, block):
    """Each tensor flattened and cut into ``(block,)`` tiles; scalars as they
    are."""
    return tuple(
        operand.flatten().tile((block,)) if operand.ndim else operand
        for operand in operands
    )


def _order_by_output(shape, operand_strides):
    first = operand_strides[0]
    order = sorted(range(len(shape)), key=lambda i: -abs(first[i]))
    return (
        tuple(shape[i] for i in order),
        [tuple(strides[i] for i in order) for strides in operand_strides],
    )


class ElementwiseLaunch:
    """A planned elementwise launch of `application` over `out`'s shape.

    `inputs` maps each tensor parameter name of the application to its
    `TensorMeta`, `scalars` each scalar parameter to its value (`out` is the
    application's output parameter). Call it as ``launch(stream, *inputs,
    out)``, the operator's order.
    """

    def __init__(
        self,
        operator,
        name: str,
        application,
        out,
        inputs: dict,
        scalars: dict | None = None,
    ) -> None:
        require_device(operator.name, operator.device)
        scalars = dict(scalars or {})
        shape = tuple(out.shape)
        numel = 1
        for size in shape:
            numel *= size
        self.numel = numel
        self.device = operator.device
        operand_strides = [tuple(out.strides)] + [
            broadcast_strides(meta.shape, meta.strides, shape)
            for meta in inputs.values()
        ]
        ordered_shape, ordered_strides = _order_by_output(shape, operand_strides)
        coalesced, strides = coalesce(ordered_shape, ordered_strides)
        if not coalesced:
            coalesced, strides = (1,), [(0,) for _ in strides]
        ndim = len(coalesced)
        block = (
            min(max(next_power_of_two(numel), 16), INTERPRETER_BLOCK_LIMIT)
            if INTERPRETER
            else GPU_BLOCK
        )
        # The kernel's pointers come in spec order: the inputs, then `out`.
        order = (*inputs, *scalars, "out")
        specs = tuple(
            TensorSpec(key, 0) if key in scalars else TensorSpec(key, ndim)
            for key in order
        )
        tensors = {"out": out, **inputs}
        tensor_strides = dict(zip(("out", *inputs), strides))
        operands = {
            key: scalars[key]
            if key in scalars
            else tensor_operand(tensors[key], coalesced, tensor_strides[key])
            for key in order
        }
        self.empty = numel == 0
        if not self.empty:
            source = kernel_source(
                name, elementwise_arrangement, application, specs, {"block": block}
            )
            self.launch = bind_kernel(source, operands, self.device)
        self.overlap = OverlapGuard(out, tuple(inputs.values()))

    def __call__(self, stream: int, *tensors) -> None:
        """Runs on the caller's tensors, in the operator's order: the inputs
        (in the order of `inputs`), then `out`."""
        if self.empty:
            return
        *inputs, out = tensors
        if self.overlap(out, inputs):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self.launch(stream, *inputs, staging)
                out.copy_(staging)
            return
        self.launch(stream, *tensors)
