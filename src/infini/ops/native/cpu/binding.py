"""Bound launches of the CPU kernels (`Operator.bind_launch`).

A recorded call (`infini.ops.core.recording`) replays through a callable of
no arguments that calls its kernel on arguments fixed once, addresses
included: no `data_ptr` reads, no overlap checks, no tuple building per
call, and through the kernel's compiled entry point (`compiled_entry`).
These are the two shapes such a callable takes.
"""

from __future__ import annotations

from functools import partial


def do_nothing() -> None:
    """The bound launch of an empty call."""


def compiled_entry(kernel, arguments: tuple):
    """The compiled function `kernel` (a Numba dispatcher) runs for
    `arguments`, called directly: the dispatcher matches the argument types
    against its compiled signatures on every call (about 150 ns for a
    dozen arguments, against 170 ns for the whole call without it), and a
    bound launch's types never change. `kernel` itself where it has no
    signature for exactly these types (then the dispatcher compiles or
    converts as usual). The dispatcher owns the compiled code: a launch
    keeps it referenced (as its `kernel` attribute)."""
    overloads = getattr(kernel, "overloads", None)
    if overloads is None:
        return kernel
    try:
        signature = tuple(kernel.typeof_pyval(value) for value in arguments)
    except (TypeError, ValueError):
        return kernel
    compiled = overloads.get(signature)
    return kernel if compiled is None else compiled.entry_point


def checked(kernel, arguments: tuple, fail):
    """``kernel(*arguments)`` for a kernel that returns -1, or the index of
    the first bad element it found (nothing written then), which goes to
    ``fail(bad)`` to raise the operator's error."""
    entry = compiled_entry(kernel, arguments)

    def launch() -> None:
        bad = entry(*arguments)
        if bad >= 0:
            fail(bad)

    launch.kernel = kernel
    return launch


def bound(kernel, *arguments):
    """``kernel(*arguments)`` for a kernel that cannot fail."""
    launch = partial(compiled_entry(kernel, arguments), *arguments)
    launch.kernel = kernel
    return launch
