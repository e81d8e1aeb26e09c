"""Recording the operator calls of a block of code to run them again.

A caller that runs the same calls on the same tensors over and over (the
model runner's decode step: the same buffers, views and weights every step,
only the values in them change) records them once with `record` and then
runs `CallRecording.replay`, which launches each recorded operator on the
recorded arguments directly: no argument binding, no cache key, no lookup.
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

from . import tracing


class CallRecording:
    """The launches of a recorded block, in order, and the thread that
    recorded them (whose operators they are: the dispatcher keeps an
    operator, scratch included, per thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.complete = not tracing.TRACE_CALLS
        self.thread = threading.get_ident()

    def add(self, run, operator, stream, values: tuple) -> None:
        if threading.get_ident() == self.thread:
            self.calls.append((run, operator, stream, values))

    def replay(self) -> None:
        """Launches every recorded call again, in order (on the recording
        thread only: another thread must run the block itself)."""
        if threading.get_ident() != self.thread:
            raise RuntimeError(
                "a call recording replays only on the thread that recorded it."
            )
        for run, operator, stream, values in self.calls:
            run(operator, stream, values)


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
