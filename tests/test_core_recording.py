"""Recording operator calls and replaying them (`infini.ops.core.recording`,
what the model runner's decode steps use)."""

import threading

import pytest
import torch

import infini.ops
from infini.ops.core import recording, tracing

pytestmark = pytest.mark.smoke


def _block(x, y, out, total):
    infini.ops.add(x, y, out)
    infini.ops.mul(out, x, total)


def test_replay_runs_the_recorded_calls_on_the_current_values():
    x, y = torch.randn(13, 4), torch.randn(13, 4)
    out, total = torch.empty(13, 4), torch.empty(13, 4)
    with recording.record() as recorded:
        _block(x, y, out, total)
    assert recorded.complete
    assert len(recorded.calls) == 2
    # New values in the same tensors: the replay computes with them.
    x.copy_(torch.randn(13, 4))
    y.copy_(torch.randn(13, 4))
    out.fill_(float("nan"))
    total.fill_(float("nan"))
    recorded.replay()
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    torch.testing.assert_close(total, (x + y) * x, rtol=0, atol=0)


def test_class_form_calls_are_recorded():
    x, out = torch.randn(13, 4), torch.empty(13, 4)
    add = infini.ops.Add(x, x, out)
    with recording.record() as recorded:
        add(x, x, out)
    x.copy_(torch.randn(13, 4))
    recorded.replay()
    torch.testing.assert_close(out, x + x, rtol=0, atol=0)


def test_calls_outside_the_block_are_not_recorded():
    x, out = torch.randn(13, 4), torch.empty(13, 4)
    with recording.record() as recorded:
        pass
    infini.ops.add(x, x, out)
    assert recorded.calls == []
    assert recording.ACTIVE is None


def test_a_second_recording_at_once_records_nothing_and_is_incomplete():
    x, out = torch.randn(13, 4), torch.empty(13, 4)
    with recording.record() as outer:
        with recording.record() as inner:
            infini.ops.add(x, x, out)
        assert recording.ACTIVE is outer
    assert not inner.complete and inner.calls == []
    assert outer.complete and len(outer.calls) == 1


def test_calls_of_other_threads_are_not_recorded():
    x, out = torch.randn(13, 4), torch.empty(13, 4)
    other = torch.empty(13, 4)
    with recording.record() as recorded:
        worker = threading.Thread(target=infini.ops.add, args=(x, x, other))
        worker.start()
        worker.join()
        infini.ops.add(x, x, out)
    assert len(recorded.calls) == 1
    torch.testing.assert_close(other, x + x, rtol=0, atol=0)


def test_replay_on_another_thread_is_refused():
    x, out = torch.randn(13, 4), torch.empty(13, 4)
    with recording.record() as recorded:
        infini.ops.add(x, x, out)
    errors = []

    def replay():
        try:
            recorded.replay()
        except RuntimeError as error:
            errors.append(str(error))

    worker = threading.Thread(target=replay)
    worker.start()
    worker.join()
    assert errors and "thread that recorded it" in errors[0]


def test_a_recording_while_tracing_is_incomplete(monkeypatch):
    # A replay would skip the trace lines `INFINI_OPS_TRACE_CALLS` promises.
    monkeypatch.setattr(tracing, "TRACE_CALLS", True)
    with recording.record() as recorded:
        pass
    assert not recorded.complete
