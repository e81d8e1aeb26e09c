"""Bound launches of the CPU kernels (`Operator.bind_launch`).

A recorded call (`infini.ops.core.recording`) replays through a callable of
no arguments that calls its kernel on arguments fixed once, addresses
included: no `data_ptr` reads, no overlap checks, no tuple building per
call. These are the two shapes such a callable takes.
"""

from __future__ import annotations

from functools import partial


def do_nothing() -> None:
    """The bound launch of an empty call."""


def checked(kernel, arguments: tuple, fail):
    """``kernel(*arguments)`` for a kernel that returns -1, or the index of
    the first bad element it found (nothing written then), which goes to
    ``fail(bad)`` to raise the operator's error."""

    def launch() -> None:
        bad = kernel(*arguments)
        if bad >= 0:
            fail(bad)

    return launch


def bound(kernel, *arguments):
    """``kernel(*arguments)`` for a kernel that cannot fail."""
    return partial(kernel, *arguments)
