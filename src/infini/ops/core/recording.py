"""Recording the operator calls of a block of code to run them again.

A caller that runs the same calls on the same tensors over and over (the
model runner's decode step: the same buffers, views and weights every step,
only the values in them change) records them once with `record` and then
runs `CallRecording.replay`, which launches each recorded operator on the
recorded arguments directly: no argument binding, no cache key, no lookup,
and for operators that bind their launch (`Operator.bind_launch`) not even
the reading of addresses: the kernel is called on arguments fixed once.
That is a few microseconds per call, several hundred calls per step.

Replaying is only right while every recorded tensor keeps its memory and
geometry and every scalar its value: the recorder's caller owns them and
must know that. A recording is `complete` only when every call in the block
went through the dispatcher's cached or building path on the recording
thread; a call with a `config` (which builds its own operator each time)
marks it incomplete, and so does a call traced by `INFINI_OPS_TRACE_CALLS`
(a replay would skip its trace line).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from . import tracing


class CallRecording:
    """The launches of a recorded block, in order, and the thread that
    recorded them (whose operators they are: the dispatcher keeps an
    operator, scratch included, per thread).

    `calls` holds ``(bound, operator, stream, values)`` per call: the
    dispatcher's `BoundOverload`, the operator it launched and the call's
    stream and values. The first replay binds each call where its operator
    can (`Operator.bind_launch`: the kernel and its arguments, addresses
    included, fixed once), which leaves a replayed call the kernel's own
    dispatch; the others replay through the overload's `run`.
    """

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.complete = not tracing.TRACE_CALLS
        self.thread = threading.get_ident()
        self._launches: list | None = None

    def add(self, bound, operator, stream, values: tuple) -> None:
        if threading.get_ident() == self.thread:
            self.calls.append((bound, operator, stream, values))

    def launches(self) -> list:
        """A callable of no arguments per recorded call, bound where its
        operator binds (see the class)."""
        if self._launches is None:
            self._launches = [
                bound.bind(operator, stream, values)
                or partial(bound.run, operator, stream, values)
                for bound, operator, stream, values in self.calls
            ]
        return self._launches

    def replay(self) -> None:
        """Launches every recorded call again, in order (on the recording
        thread only: another thread must run the block itself)."""
        if threading.get_ident() != self.thread:
            raise RuntimeError(
                "a call recording replays only on the thread that recorded it."
            )
        for launch in self.launches():
            launch()


# The recording in progress (at most one per process): the dispatcher's
# cached path tests this once per call.
ACTIVE: CallRecording | None = None


@contextmanager
def record() -> Iterator[CallRecording]:
    """Records the operator calls the block makes on this thread. While
    another recording is in progress (another thread's), the one yielded
    records nothing and is incomplete."""
    global ACTIVE
    recording = CallRecording()
    if ACTIVE is not None:
        recording.complete = False
        yield recording
        return
    ACTIVE = recording
    try:
        yield recording
    finally:
        ACTIVE = None


def mark_incomplete() -> None:
    """Called by a call the recording cannot replay."""
    if ACTIVE is not None and threading.get_ident() == ACTIVE.thread:
        ACTIVE.complete = False
