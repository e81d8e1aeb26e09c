"""Operators as torch custom ops (`infini.ops.core.custom_ops`).

Every operator of the build registers, its schemas marking the written
tensors as mutated; functions calling operators compile with
``fullgraph=True`` (a graph break fails) and give the eager results; eager
calls register nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import infini.ops as ops
from infini.ops.core import custom_ops
from infini.ops.core.signature import INT_LIST_LIST, Overload


def entries():
    ops.__all__  # noqa: B018 - builds the surface
    return ops._entries


def expected_argument_names(entry, overload) -> list[str]:
    names = []
    for parameter in overload.parameters:
        if parameter.kind == INT_LIST_LIST:
            names += [f"{parameter.name}_flat", f"{parameter.name}_lengths"]
        else:
            names.append(parameter.name)
    names += ["stream", "implementation_index"]
    return names + (["config"] if entry.has_triton else [])


def test_every_operator_registers_with_its_mutated_arguments():
    namespace = getattr(torch.ops, custom_ops.NAMESPACE)
    checked = 0
    for name, entry in entries().items():
        registered = custom_ops.register(entry)
        # Registering again returns the same ops.
        assert custom_ops.register(entry) is registered
        packet = getattr(namespace, name)
        for bound, op in zip(entry.bound_overloads, registered, strict=True):
            assert getattr(packet, f"overload{bound.index}") is op
            schema = op._schema
            assert schema.returns == []
            arguments = schema.arguments
            assert [a.name for a in arguments] == expected_argument_names(
                entry, bound.overload
            ), name
            by_name = {a.name: a for a in arguments}
            alias_sets = []
            for parameter in bound.overload.parameters:
                if parameter.kind == INT_LIST_LIST:
                    continue
                argument = by_name[parameter.name]
                written = (
                    argument.alias_info is not None and argument.alias_info.is_write
                )
                assert written == parameter.writes, f"{name}: {parameter.name}"
                assert ("Tensor" in str(argument.type)) == parameter.is_tensor
                if written:
                    alias_sets.append(frozenset(argument.alias_info.before_set))
            # Distinct alias sets: no two outputs are declared to alias.
            assert len(set(alias_sets)) == len(alias_sets), name
            checked += 1
    assert checked >= len(entries())


def test_schema_text_of_every_kind():
    overload = Overload(
        0,
        "x: Tensor, y: Tensor|None, xs: list[Tensor], ys: list[Tensor|None], "
        "a: float, b: int|None, c: bool, d: str, e: dtype, f: list[int], "
        "g: list[float]|None, h: list[list[int]], out: Tensor!, "
        "extra: Tensor|None!, outs: list[Tensor]!",
    )
    assert custom_ops.schema(overload) == (
        "(Tensor x, Tensor? y, Tensor[] xs, Tensor?[] ys, float a, SymInt? b, "
        "bool c, str d, ScalarType e, SymInt[] f, float[]? g, int[] h_flat, "
        "int[] h_lengths, Tensor(a0!) out, Tensor(a1!)? extra, Tensor(a2!)[] outs, "
        "int stream=0, int? implementation_index=None) -> ()"
    )
    assert custom_ops.schema(overload, has_config=True).endswith(
        "int? implementation_index=None, str? config=None) -> ()"
    )
    parsed = torch._C.parse_schema("infini::probe" + custom_ops.schema(overload))
    written = [
        a.name for a in parsed.arguments if a.alias_info and a.alias_info.is_write
    ]
    assert written == ["out", "extra", "outs"]


def test_registered_op_runs_the_operator():
    custom_ops.register(entries()["add"])
    a, b = torch.randn(5), torch.randn(5)
    out = torch.empty(5)
    torch.ops.infini.add.overload0(a, b, 2.0, out)
    torch.testing.assert_close(out, a + 2.0 * b)
    torch.ops.infini.add.overload1(a, b, out, stream=0, implementation_index=0)
    torch.testing.assert_close(out, a + b)


def block(
    x, weight, norm, residual, positions, cos_sin, k_cache, v_cache, tables, lens, out
):
    """A decoder-ish step: norm, projection, rotary, attention, gated MLP."""
    tokens, hidden = x.shape
    head = cos_sin.shape[-1]
    normed = torch.empty_like(x)
    ops.rms_norm(x, norm, 1e-6, normed)
    projected = torch.empty(tokens, weight.shape[0], dtype=x.dtype)
    ops.linear(normed, weight, None, projected)
    query = projected.view(tokens, -1, head)
    # By keyword, and leaving `rope_dim_offset` and `inverse` to defaults.
    ops.rotary_embedding(positions, query, None, cos_sin, head_size=head, is_neox=True)
    attention = torch.empty_like(query)
    ops.paged_attention_infinilm(
        query, k_cache, v_cache, tables, lens, None, head**-0.5, attention
    )
    gate_up = torch.cat((attention.flatten(1), attention.flatten(1) * 0.5), 1)
    activation = torch.empty(tokens, gate_up.shape[1] // 2, dtype=x.dtype)
    ops.silu_and_mul(gate_up, activation)
    # `add` with and without `alpha` (two overloads).
    ops.add(activation, residual, 0.5, out)
    ops.add(out, residual, out)
    return out.sum(-1)


def block_inputs(tokens: int):
    heads, head, kv_heads, block_size, blocks = 2, 8, 1, 4, 6
    hidden = heads * head
    generator = torch.Generator().manual_seed(tokens)

    def random(*shape):
        return torch.randn(*shape, generator=generator)

    lens = torch.tensor([5 + (i % 3) for i in range(tokens)], dtype=torch.int32)
    tables = torch.stack(
        [torch.randperm(blocks, generator=generator)[:2] for _ in range(tokens)]
    ).to(torch.int32)
    return (
        random(tokens, hidden),
        random(hidden, hidden) * 0.3,
        random(hidden).abs() + 0.5,
        random(tokens, hidden),
        torch.arange(tokens, dtype=torch.int64) + 3,
        random(32, head),
        random(blocks, kv_heads, block_size, head),
        random(blocks, kv_heads, block_size, head),
        tables,
        lens,
        torch.empty(tokens, hidden),
    )


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_block_matches_eager(backend):
    torch._dynamo.reset()
    compiled = torch.compile(block, backend=backend, fullgraph=True, dynamic=True)
    for tokens in (3, 5):
        inputs = block_inputs(tokens)
        expected = block(*[t.clone() for t in inputs])
        got = compiled(*[t.clone() for t in inputs])
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_compiled_call_writes_its_outputs():
    """The caller's output tensors (graph inputs) hold the results."""

    def norm_then_cast(x, weight, out, half):
        ops.rms_norm(x, weight, 1e-5, out)
        ops.cast(out, half)

    x, weight = torch.randn(4, 16), torch.rand(16) + 0.5
    out, half = torch.empty(4, 16), torch.empty(4, 16, dtype=torch.bfloat16)
    torch.compile(norm_then_cast, backend="aot_eager", fullgraph=True)(
        x, weight, out, half
    )
    expected = torch.empty(4, 16)
    ops.rms_norm(x, weight, 1e-5, expected)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(half, expected.to(torch.bfloat16))


def test_compiled_call_keeps_the_implementation_index():
    def add_with(a, b, out, index):
        ops.add(a, b, out, implementation_index=index)

    compiled = torch.compile(add_with, backend="aot_eager", fullgraph=True)
    a, b, out = torch.randn(6), torch.randn(6), torch.empty(6)
    for index in ops.Add.active_implementation_indices("cpu"):
        out.fill_(0)
        compiled(a, b, out, index)
        torch.testing.assert_close(out, a + b)
    # An inactive slot fails as the eager call does, when the graph runs.
    with pytest.raises(ValueError, match="`implementation_index` 7 is not active"):
        compiled(a, b, out, 7)


def test_compiled_nested_int_lists_and_tensor_lists():
    """`list[list[int]]` travels flattened; `list[Tensor]` as `Tensor[]`."""

    def contract(a, b, out, parts, joined):
        ops.tensordot(a, b, [[1, 2], [0, 1]], out)
        ops.cat(parts, 0, joined)

    a, b = torch.randn(3, 4, 5), torch.randn(4, 5, 2)
    parts = [torch.randn(2, 3), torch.randn(1, 3)]
    out, joined = torch.empty(3, 2), torch.empty(3, 3)
    torch.compile(contract, backend="aot_eager", fullgraph=True)(
        a, b, out, parts, joined
    )
    torch.testing.assert_close(out, torch.tensordot(a, b, [[1, 2], [0, 1]]))
    torch.testing.assert_close(joined, torch.cat(parts))


def test_traced_calls_reject_what_a_schema_cannot_take():
    def split_cat(stacked, out):
        # Eager accepts a tensor for `list[Tensor]` (its rows); traced not.
        ops.cat(stacked, 0, out)

    with pytest.raises(Exception, match="under torch.compile, `tensors` must be"):
        torch.compile(split_cat, backend="aot_eager", fullgraph=True)(
            torch.randn(2, 3), torch.empty(6)
        )

    def wrong_types(x, out):
        ops.silu_and_mul(x, "not a tensor", out)

    with pytest.raises(Exception, match="incompatible function arguments"):
        torch.compile(wrong_types, backend="aot_eager", fullgraph=True)(
            torch.randn(2, 4), torch.empty(2, 2)
        )


def test_eager_calls_register_nothing():
    """Registration waits for a trace: an eager call neither registers
    custom ops nor imports Dynamo's machinery for them."""
    script = textwrap.dedent(
        """
        import torch
        import infini.ops as ops
        a = torch.ones(4)
        out = torch.empty(4)
        ops.add(a, a, out)
        ops.add(a, a, out)
        assert ops._entries["add"].custom_ops is None
        assert not hasattr(torch.ops.infini, "add")
        assert "torch._dynamo" not in __import__("sys").modules
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
