"""Recording operator calls and replaying them (`infini.ops.core.recording`,
what the model runner's decode steps use)."""

import threading
from functools import partial

import pytest
import torch

import infini.ops
from infini.ops.core import recording, tracing
from infini.ops.core.errors import OperatorError

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


# --- Bound launches (`Operator.bind_launch`) --------------------------------


def _falls_back(recorded) -> list[str]:
    """The operators of `recorded` whose replay goes through the overload's
    `run` rather than a bound launch."""
    return [
        call[1].name
        for launch, call in zip(recorded.launches(), recorded.calls, strict=True)
        if isinstance(launch, partial) and launch.func is call[0].run
    ]


def _decode_block(t):
    """One decoder layer's calls at a decode shape (two tokens), on the CPU
    kernels that bind their launches."""
    ops = infini.ops
    ops.embedding(t["ids"], t["table"], t["residual"])
    ops.rms_norm(t["residual"], t["norm"], 1e-6, t["hidden"])
    ops.linear(t["hidden"], t["qkv_weight"], None, t["qkv"])
    query, key, value = t["qkv"].split((64, 32, 32), dim=-1)
    query = query.view(2, 4, 16)
    key, value = key.view(2, 2, 16), value.view(2, 2, 16)
    ops.rotary_embedding(t["positions"], query, key, t["cos_sin"], 16, True)
    ops.paged_caching_infinilm(key, value, t["slots"], t["k_cache"], t["v_cache"])
    ops.paged_attention_infinilm(
        query, t["k_cache"], t["v_cache"], t["tables"], t["lengths"], None, 0.25,
        t["attention"],
    )  # fmt: skip
    ops.ggml_mul_mat_vec_a8(t["o_blocks"], t["attention"].view(2, 64), 8, 32, t["o"])
    ops.fused_add_rms_norm(t["o"], t["residual"], t["norm"], 1e-6)
    ops.ggml_mul_mat_interleaved_a8(t["up_blocks"], t["o"], 8, 64, t["gate_up"])
    ops.silu_and_mul(t["gate_up"], t["activation"])
    ops.gelu_tanh_and_mul(t["gate_up"], t["gelu"])


def _decode_tensors():
    from tests._ggml import blocks

    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    up_blocks = torch.empty_like(blocks(8, 64, 32, seed=1))
    infini.ops.ggml_interleave(blocks(8, 64, 32, seed=1), 8, up_blocks)
    angles = torch.arange(64.0)[:, None] * torch.rand(8, generator=generator)
    return {
        "ids": torch.tensor([3, 9]),
        "table": randn(16, 32),
        "residual": torch.empty(2, 32),
        "norm": randn(32),
        "hidden": torch.empty(2, 32),
        "qkv_weight": randn(128, 32),
        "qkv": torch.empty(2, 128),
        "positions": torch.tensor([5, 11]),
        "cos_sin": torch.cat((angles.cos(), angles.sin()), dim=-1),
        "slots": torch.tensor([5, 27], dtype=torch.int32),
        "k_cache": randn(4, 2, 16, 16),
        "v_cache": randn(4, 2, 16, 16),
        "tables": torch.tensor([[0, 3], [1, 2]], dtype=torch.int32),
        "lengths": torch.tensor([6, 28], dtype=torch.int32),
        "attention": torch.empty(2, 4, 16),
        "o_blocks": blocks(8, 32, 64, seed=2),
        "o": torch.empty(2, 32),
        "up_blocks": up_blocks,
        "gate_up": torch.empty(2, 64),
        "activation": torch.empty(2, 32),
        "gelu": torch.empty(2, 32),
    }


def test_replayed_calls_launch_bound_and_match_fresh_calls():
    tensors = _decode_tensors()
    with recording.record() as recorded:
        _decode_block(tensors)
    assert recorded.complete and len(recorded.calls) == 11
    # Every call binds: none replays through the dispatcher's `run`.
    assert _falls_back(recorded) == []
    for step in range(3):
        # New inputs in the same tensors (tokens, positions, cache slots).
        tensors["ids"].copy_(torch.tensor([step + 1, 15 - step]))
        tensors["positions"].copy_(torch.tensor([step + 6, step + 12]))
        tensors["slots"].copy_(torch.tensor([step + 6, step + 28]))
        tensors["lengths"].add_(1)
        before = {name: t.clone() for name, t in tensors.items()}
        recorded.replay()
        replayed = {name: t.clone() for name, t in tensors.items()}
        for name, t in tensors.items():
            t.copy_(before[name])
        _decode_block(tensors)
        for name, t in tensors.items():
            assert torch.equal(replayed[name], t), name


def test_a_bound_launch_raises_the_operators_error():
    tensors = _decode_tensors()
    with recording.record() as recorded:
        _decode_block(tensors)
    tensors["ids"][1] = 16
    with pytest.raises(OperatorError, match=r"`embedding`: `input\[1\]` is 16"):
        recorded.replay()
    tensors["ids"][1] = 2
    tensors["slots"][0] = 10**6
    with pytest.raises(OperatorError, match="`paged_caching_infinilm`: `slot_mapping"):
        recorded.replay()


def test_a_call_that_needs_staging_replays_unbound():
    # The weight lies in the rows it normalises: every call copies it first
    # (`fused_add_rms_norm`), which a bound launch would skip.
    input, residual = torch.randn(4, 8), torch.randn(4, 8)
    with recording.record() as recorded:
        infini.ops.fused_add_rms_norm(input, residual, input[0], 1e-6)
    assert _falls_back(recorded) == ["fused_add_rms_norm"]
    expected_input, expected_residual = input.clone(), residual.clone()
    infini.ops.fused_add_rms_norm(
        expected_input, expected_residual, expected_input[0], 1e-6
    )
    recorded.replay()
    assert torch.equal(input, expected_input)
    assert torch.equal(residual, expected_residual)
