import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from tests.test_paged_attention_infinilm import (
    DTYPES,
    make_cache,
    make_tables,
    window_inputs,
)
from tests.test_paged_attention_infinilm import reference as _reference
from tests.utils import Payload, empty_strided

# query tokens per sequence, cached tokens per sequence (the queries are the
# last ones), heads, kv_heads, head_size, block_size, alibi, smoke
CASES = (
    ((1, 13, 33), (5, 13, 40), 32, 8, 128, 16, False, True),
    ((1, 13, 70), (1, 20, 75), 8, 8, 64, 8, True, False),
    ((0, 70, 2), (3, 70, 9), 4, 2, 64, 16, False, False),
)
if TRITON_INTERPRETER:
    # Triton's interpreter runs a program per (query tile, kv head) as NumPy
    # steps: fewer heads, with the same grouping, head sizes and sequences.
    CASES = (
        ((1, 13, 33), (5, 13, 40), 8, 2, 128, 16, False, True),
        ((1, 13, 70), (1, 20, 75), 2, 2, 64, 8, True, False),
        ((0, 70, 2), (3, 70, 9), 4, 2, 64, 16, False, False),
    )


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _prefill(q, k_cache, v_cache, tables, lengths, cum, slopes, scale, out, index):
    infini.ops.paged_attention_prefill_infinilm(
        q, k_cache, v_cache, tables, lengths, cum, slopes, scale, out,
        implementation_index=index,
    )  # fmt: skip
    return out


def _torch_prefill(q, k_cache, v_cache, tables, lengths, cum, slopes, scale, out,
                   index):  # fmt: skip
    expected = _reference(q, k_cache, v_cache, tables, lengths, cum, slopes, scale)
    return expected.to(out.dtype)


def _cumulative(query_lens, dtype=torch.int32):
    return torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "query_lens, seq_lens, heads, kv_heads, head_size, block_size, alibi, dtype, "
    "rtol, atol",
    list(_params()),
)
def test_paged_attention_prefill_infinilm(
    query_lens,
    seq_lens,
    heads,
    kv_heads,
    head_size,
    block_size,
    alibi,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    seqs, tokens = len(seq_lens), sum(query_lens)
    max_blocks = -(-max(seq_lens) // block_size) + 1
    blocks = seqs * max_blocks + 3
    k_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype)
    v_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype, "HND")
    tables = make_tables(seq_lens, block_size, max_blocks, blocks)
    lengths = torch.tensor(seq_lens, dtype=torch.int32)
    cum = _cumulative(query_lens)
    # `q` and `out` strided: the heads of a fused (tokens, 2 * heads, d) buffer.
    q = torch.randn(tokens, 2 * heads, head_size, dtype=dtype)[:, :heads]
    out = empty_strided(
        (tokens, heads, head_size), (heads * head_size * 2, head_size, 1), dtype=dtype
    )
    slopes = torch.rand(heads) if alibi else None
    args = (q, k_cache, v_cache, tables, lengths, cum, slopes, head_size**-0.5, out)
    return Payload(
        _prefill,
        _torch_prefill,
        tuple(a.to(device) if torch.is_tensor(a) else a for a in args)
        + (implementation_index,),
        rtol=rtol,
        atol=atol,
    )


def test_paged_attention_prefill_infinilm_int64_indices(device, implementation_index):
    query_lens, seq_lens = (3, 17), (3, 30)
    k_cache = make_cache(8, 2, 16, 64, torch.float32).to(device)
    v_cache = make_cache(8, 2, 16, 64, torch.float32).to(device)
    tables = make_tables(seq_lens, 16, 4, 8, torch.int64).to(device)
    lengths = torch.tensor(seq_lens, dtype=torch.int64, device=device)
    cum = _cumulative(query_lens, torch.int64).to(device)
    q = torch.randn(20, 4, 64, device=device)
    out = torch.empty_like(q)
    _prefill(q, k_cache, v_cache, tables, lengths, cum, None, 0.1, out,
             implementation_index)  # fmt: skip
    expected = _reference(q, k_cache, v_cache, tables, lengths, cum, None, 0.1)
    assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_paged_attention_prefill_infinilm_cached_prefixes_and_odd_groups(
    dtype, rtol, atol, device, implementation_index
):
    """Queries behind long cached prefixes (key blocks every query row sees,
    which kernels may run unmasked), a sequence without queries, three
    query heads per kv head, a head size that is no power of two, ALiBi,
    and more sequences than one step of a search over them."""
    query_lens, seq_lens = (60, 0, 3, 1, 17, 2), (200, 5, 3, 40, 17, 130)
    heads, kv_heads, head_size, block_size = 6, 2, 40, 16
    max_blocks = -(-max(seq_lens) // block_size)
    blocks = sum(-(-n // block_size) for n in seq_lens) + 2
    k_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype)
    v_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype, "HND")
    tables = make_tables(seq_lens, block_size, max_blocks, blocks)
    lengths = torch.tensor(seq_lens, dtype=torch.int32)
    cum = _cumulative(query_lens)
    q = torch.randn(sum(query_lens), heads, head_size, dtype=dtype)
    slopes = torch.rand(heads)
    args = [t.to(device) for t in (q, k_cache, v_cache, tables, lengths, cum, slopes)]
    out = torch.empty_like(args[0])
    _prefill(*args, 0.2, out, implementation_index)
    expected = _reference(*args, 0.2)
    torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("overlap", ("same", "shifted"))
def test_paged_attention_prefill_infinilm_out_overlapping_q(
    overlap, device, implementation_index
):
    """`out` may be `q` itself; an `out` that overlaps `q` other than element
    for element still gets the attention of the original queries."""
    query_lens, seq_lens = (5, 12), (9, 12)
    k_cache = make_cache(4, 2, 16, 32, torch.float32).to(device)
    v_cache = make_cache(4, 2, 16, 32, torch.float32).to(device)
    tables = make_tables(seq_lens, 16, 2, 4).to(device)
    lengths = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    cum = _cumulative(query_lens).to(device)
    buffer = torch.randn(18, 4, 32, device=device)
    if overlap == "same":
        q = out = buffer[:17]
    else:
        q, out = buffer[1:], buffer[:17]
    expected = _reference(q.clone(), k_cache, v_cache, tables, lengths, cum, None, 0.3)
    _prefill(q, k_cache, v_cache, tables, lengths, cum, None, 0.3, out,
             implementation_index)  # fmt: skip
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_paged_attention_prefill_infinilm_no_tokens(device, implementation_index):
    k_cache = torch.randn(2, 2, 16, 64, device=device)
    tables = torch.zeros(2, 1, dtype=torch.int32, device=device)
    lengths = torch.tensor([3, 0], dtype=torch.int32, device=device)
    cum = torch.zeros(3, dtype=torch.int32, device=device)
    q = torch.empty(0, 4, 64, device=device)
    _prefill(q, k_cache, k_cache, tables, lengths, cum, None, 0.1, torch.empty_like(q),
             implementation_index)  # fmt: skip


@pytest.mark.parametrize(
    "cum, seq_lens, match",
    [
        ((1, 2, 4), (5, 5), r"`cum_seq_lens_q\[0\]` is 1; it must be 0"),
        ((0, 3, 2), (5, 5), r"`cum_seq_lens_q` must not decrease"),
        ((0, 1, 3), (5, 5), r"`cum_seq_lens_q\[2\]` is 3; it must be 4"),
        ((0, 3, 4), (2, 5), r"sequence 0 has 3 query tokens but `seq_lens\[0\]` is 2"),
        ((0, 3, 4), (5, 99), r"`seq_lens\[1\]` is 99, out of the range \[0, 32\]"),
        ((0, 3, 4), (5, 17), r"`block_tables\[1, 1\]` is 4, out of the range \[0, 4\)"),
        ((0, 3, 4), (-2, 5), r"`seq_lens\[0\]` is -2"),
    ],
)
def test_paged_attention_prefill_infinilm_rejects_bad_indices_without_writing(
    cum, seq_lens, match, device
):
    k_cache = torch.randn(4, 2, 16, 64, device=device)
    # Only the second block of the second sequence is out of range, and it
    # is read only when that sequence is longer than one block.
    tables = torch.tensor([[0, 1], [2, 4]], dtype=torch.int32, device=device)
    lengths = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    cum = torch.tensor(cum, dtype=torch.int32, device=device)
    q = torch.randn(4, 4, 64, device=device)
    out = torch.full((4, 4, 64), 7.0, device=device)
    with pytest.raises(
        ValueError, match=f"`paged_attention_prefill_infinilm`: {match}"
    ):
        infini.ops.paged_attention_prefill_infinilm(
            q, k_cache, k_cache, tables, lengths, cum, None, 0.1, out
        )
    assert bool((out == 7.0).all())


def test_paged_attention_prefill_infinilm_rejects_bad_cum_shape(device):
    cache = torch.randn(4, 2, 16, 64, device=device)
    tables = torch.zeros(2, 2, dtype=torch.int32, device=device)
    lengths = torch.ones(2, dtype=torch.int32, device=device)
    cum = torch.zeros(2, dtype=torch.int32, device=device)
    q = torch.randn(4, 4, 64, device=device)
    with pytest.raises(ValueError, match=r"`cum_seq_lens_q` must have shape \(3,\)"):
        infini.ops.paged_attention_prefill_infinilm(
            q, cache, cache, tables, lengths, cum, None, 0.1, torch.empty_like(q)
        )


# -- the sliding `window` (see the decode tests)


def _prefill_window(inputs, slopes, scale, window, device, index):
    q, k_cache, v_cache, tables, lengths, cum = (x.to(device) for x in inputs)
    out = torch.empty_like(q)
    infini.ops.paged_attention_prefill_infinilm(
        q, k_cache, v_cache, tables, lengths, cum, slopes, scale, out,
        window=window, implementation_index=index,
    )  # fmt: skip
    return out.cpu()


def _prefill_expected(inputs, slopes, scale, window):
    return _reference(*inputs, slopes, scale, window)


# query tokens per sequence, cached tokens per sequence, window: short
# queries (the online kernel) and long ones (64 or more query tokens: the
# CPU's GEMM path), windows inside a block of keys, across several, and
# longer than every sequence.
WINDOW_CASES = (
    ((1, 13, 33), (5, 13, 40), 4),
    ((1, 13, 33), (5, 13, 40), 17),
    ((7, 70, 2), (7, 75, 9), 1),
    ((7, 70, 2), (7, 75, 9), 32),
    ((130, 3), (200, 3), 64),
    ((130, 3), (200, 3), 129),
    ((130, 3), (200, 3), 1000),
)
if TRITON_INTERPRETER:
    WINDOW_CASES = WINDOW_CASES[:4] + WINDOW_CASES[5:6]


@pytest.mark.parametrize("query_lens, seq_lens, window", WINDOW_CASES)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES, ids=str)
def test_paged_attention_prefill_infinilm_window(
    query_lens, seq_lens, window, dtype, rtol, atol, device, implementation_index
):
    inputs = window_inputs(query_lens, seq_lens, 4, 2, 64, 8, dtype)
    actual = _prefill_window(inputs, None, 0.125, window, device, implementation_index)
    expected = _prefill_expected(inputs, None, 0.125, window)
    assert torch.allclose(actual.double(), expected, rtol=rtol, atol=atol)


def test_paged_attention_prefill_infinilm_window_with_alibi_and_int64(
    device, implementation_index
):
    """ALiBi distances count from the query's position, windowed or not."""
    inputs = window_inputs((3, 80), (20, 90), 4, 4, 32, 16, torch.float32, torch.int64)
    slopes = torch.rand(4)
    actual = _prefill_window(
        inputs, slopes.to(device), 0.2, 7, device, implementation_index
    )
    expected = _prefill_expected(inputs, slopes, 0.2, 7)
    assert torch.allclose(actual.double(), expected, rtol=1e-5, atol=1e-5)


def test_paged_attention_prefill_infinilm_window_gemma3_prompt(
    device, implementation_index
):
    """Gemma-3 270M: 4 query heads on 1 kv head of 256 features, a window
    of 512 sliding within a 600-token prompt."""
    if TRITON_INTERPRETER:
        pytest.skip("600 tokens of 256 features take minutes in the interpreter")
    inputs = window_inputs((600,), (600,), 4, 1, 256, 16, torch.float32)
    scale = 256**-0.5
    actual = _prefill_window(inputs, None, scale, 512, device, implementation_index)
    expected = _prefill_expected(inputs, None, scale, 512)
    assert torch.allclose(actual.double(), expected, rtol=1e-5, atol=1e-5)
    # Tokens up to position 511 see their whole prefix; later ones do not.
    unwindowed = _prefill_expected(inputs, None, scale, 0)
    assert torch.allclose(unwindowed[:512], expected[:512])
    assert not torch.allclose(unwindowed[512:], expected[512:], rtol=1e-3, atol=1e-3)


def test_paged_attention_prefill_infinilm_window_zero_is_the_default(
    device, implementation_index
):
    inputs = window_inputs((2, 5), (9, 30), 2, 1, 16, 4, torch.float32)
    windowed = _prefill_window(inputs, None, 0.3, 0, device, implementation_index)
    q, k_cache, v_cache, tables, lengths, cum = (x.to(device) for x in inputs)
    out = torch.empty_like(q)
    infini.ops.paged_attention_prefill_infinilm(
        q, k_cache, v_cache, tables, lengths, cum, None, 0.3, out,
        implementation_index=implementation_index,
    )  # fmt: skip
    assert torch.equal(windowed, out.cpu())


def test_paged_attention_prefill_infinilm_rejects_negative_window(device):
    inputs = window_inputs((1,), (4,), 2, 1, 16, 4, torch.float32)
    with pytest.raises(
        ValueError, match="`paged_attention_prefill_infinilm`: `window` must be 0"
    ):
        _prefill_window(inputs, None, 0.3, -1, device, None)
