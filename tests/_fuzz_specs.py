"""The fuzz entries of `tests/test_differential_fuzz.py`: one `Entry` per
operator with a native CPU implementation (`tests/_fuzz.py` explains the
harness). Each `draw` returns a `Case`: random arguments in logical form
and a float64 torch reference of what the call writes, following the
operator's docstring in `infini.ops.base`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tests._fuzz import FLOATS, SIXTEEN, Case, Draw, Entry

INTS = (torch.int32, torch.int64)
EVERY = (
    *FLOATS,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
)


def _shape(d: Draw, low=1, high=3, limit=2048, last_low=0) -> list[int]:
    rank = d.randint(low, high)
    if d.small:
        limit = min(limit, 96)
    shape = [d.size() for _ in range(rank)]
    if rank and last_low:
        shape[-1] = max(shape[-1], last_low)
    while math.prod(shape) > limit:
        dims = [i for i, s in enumerate(shape) if s > 1]
        shape[d.choice(dims)] //= 2
    return shape


def _values(d: Draw, *shape, dtype=None):
    """Normal values, now and then scaled far up or down (overflow of
    `exp`, denormal neighbourhoods)."""
    scale = d.choice((1.0, 1.0, 1.0, 0.01, 8.0, 40.0))
    return d.randn(*shape, dtype=dtype, scale=scale)


# -- elementwise --------------------------------------------------------------


def _unary(function, ulps=4.0, scalars=(), magnitude=None):
    """`magnitude(x)`: the size of the terms behind each result, where the
    formula cancels (GELU's ``0.5 x (1 + erf(x / sqrt(2)))`` for large
    negative x, where torch's float64 reference cancels too)."""

    def draw(d: Draw) -> Case:
        shape = _shape(d, 0, 3)
        extra = [d.choice(options) for options in scalars]
        x = _values(d, *shape)

        def reference(a):
            expected = function(a[0], *a[1:-1])
            if magnitude is None:
                return {len(a) - 1: expected}
            return {len(a) - 1: (expected, magnitude(a[0]))}

        return Case([x, *extra, d.out(*shape)], reference, ulps=ulps)

    return Entry(draw)


def _gelu(x, approximate):
    return F.gelu(x, approximate=approximate)


def _binary(function, magnitude):
    def draw(d: Draw) -> Case:
        shape = _shape(d, 0, 3)
        a, b = _values(d, *shape), _values(d, *shape)
        return Case(
            [a, b, d.out(*shape)],
            lambda a: {2: (function(a[0], a[1]), magnitude(a[0], a[1]))},
        )

    return Entry(draw)


def _add(d: Draw) -> Case:
    shape = _shape(d, 0, 3)
    alpha = d.choice((1.0, 0.5, -2.0, 0.0, 3.25))
    a, b = _values(d, *shape), _values(d, *shape)
    return Case(
        [a, b, alpha, d.out(*shape)],
        lambda a: {3: (a[0] + alpha * a[1], a[0].abs() + abs(alpha) * a[1].abs())},
    )


def _gated(gate):
    """``out = gate(input[..., :h]) * input[..., h:]``; the magnitude is
    `gate`'s own (GELU's cancels) times the second half."""

    def draw(d: Draw) -> Case:
        shape = _shape(d, 1, 3)
        half = d.size(0, 33)
        shape[-1] = half
        x = _values(d, *shape[:-1], 2 * half)

        def reference(a):
            first, second = a[0][..., :half], a[0][..., half:]
            return {1: (gate(first) * second, (first * second).abs())}

        return Case([x, d.out(*shape)], reference)

    return Entry(draw)


# -- norms ----------------------------------------------------------------------


def _rms(x, weight, eps):
    x = x.to(torch.float64)
    rms = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return x * rms * (1.0 if weight is None else weight.to(torch.float64))


def _rms_norm(d: Draw) -> Case:
    shape = _shape(d, 1, 3, last_low=1)
    hidden = shape[-1]
    eps = d.choice((1e-6, 1e-5, 0.1))
    weight_dtype = d.choice((d.dtype, d.dtype, *FLOATS))
    args = [_values(d, *shape), d.randn(hidden, dtype=weight_dtype), eps, d.out(*shape)]
    if d.coin(0.2) and eps == 1e-6:
        del args[2]
    return Case(
        args,
        lambda a: {len(a) - 1: _rms(a[0], a[1], eps)},
        length=hidden,
    )


def _add_rms_norm(d: Draw) -> Case:
    shape = _shape(d, 1, 3, last_low=1)
    hidden = shape[-1]
    eps = d.choice((1e-6, 1e-5, 0.1))
    x, r = _values(d, *shape), _values(d, *shape)
    weight = d.randn(hidden, dtype=d.choice((d.dtype, *FLOATS)))
    return Case(
        [x, r, weight, eps, d.out(*shape), d.out(*shape)],
        lambda a: {
            4: _rms(a[0] + a[1], a[2], eps),
            5: (a[0] + a[1], a[0].abs() + a[1].abs()),
        },
        length=hidden,
    )


def _fused_add_rms_norm(d: Draw) -> Case:
    shape = _shape(d, 1, 3, last_low=1)
    hidden = shape[-1]
    eps = d.choice((1e-6, 1e-5, 0.1))
    dtype = d.dtype
    weight = None if d.coin(0.2) else d.randn(hidden, dtype=d.choice((dtype, *FLOATS)))

    def reference(a):
        residual = a[0] + a[1]
        # The rounded `residual` is normalised (the docstring).
        rounded = residual.to(dtype).to(torch.float64)
        return {
            0: _rms(rounded, a[2], eps),
            1: (residual, a[0].abs() + a[1].abs()),
        }

    return Case(
        [_values(d, *shape), _values(d, *shape), weight, eps], reference, length=hidden
    )


# -- softmax --------------------------------------------------------------------


def _conditioned(z, y, dim=-1):
    """(y, magnitude) of a softmax ``y`` of scores ``z``: ``exp`` turns an
    error of half an ulp in ``z_i - max`` (the subtraction is rounded) into a
    relative error of ``|z_i - max|`` ulps of ``y_i``, so the size behind
    ``y_i`` is ``y_i (1 + |z_i| + max |z|)``."""
    if z.numel() == 0:
        return y, y
    finite = z.masked_fill(~torch.isfinite(z), 0.0).abs()
    return y, y.abs() * (1 + finite + finite.amax(dim, keepdim=True))


def _softmax_like(kind):
    def draw(d: Draw) -> Case:
        if kind == "causal":
            shape = _shape(d, 2, 4)
        else:
            shape = _shape(d, 0 if kind in ("softmax", "scaled") else 1, 3)
        x = _values(d, *shape)
        if kind in ("softmax", "softmax_infinilm"):
            ndim = max(len(shape), 1)
            dim = d.randint(-ndim, ndim - 1)
            out_dtype = d.choice((None, None, *FLOATS))
            result = out_dtype or d.dtype
            length = shape[dim] if shape else 1

            def reference(a):
                source = a[0].to(result).to(torch.float64)
                if source.ndim == 0:
                    return {3: torch.softmax(source, dim)}
                return {3: _conditioned(source, torch.softmax(source, dim), dim)}

            return Case(
                [x, dim, out_dtype, d.out(*shape, dtype=result)],
                reference,
                length=length,
            )
        if kind == "scaled":
            scale = d.choice((1.0, 0.5, -1.5, 0.0, 0.125))
            length = shape[-1] if shape else 1
            return Case(
                [x, scale, d.out(*shape)],
                lambda a: {
                    2: _conditioned(a[0] * scale, torch.softmax(a[0] * scale, -1))
                    if shape
                    else torch.ones(())
                },
                length=length,
            )
        q, k = shape[-2], shape[-1]

        def causal(a):
            i = torch.arange(q)[:, None]
            j = torch.arange(k)[None, :]
            masked = j > i + (k - q)
            scores = a[0].masked_fill(masked, float("-inf"))
            # Masked elements are 0, except in a row with nothing unmasked
            # (k < q), which is NaN throughout (the docstring).
            empty = masked.all(-1, keepdim=True)
            y = torch.softmax(scores, -1).masked_fill(masked & ~empty, 0.0)
            return {1: _conditioned(a[0], y)}

        return Case([x, d.out(*shape)], causal, length=k)

    return Entry(draw)


# -- copies and conversions ---------------------------------------------------


def _converted(d: Draw, dtype, *shape):
    """Values that convert to every dtype without undefined behaviour:
    integers of int8's range (and some halves) for integer sources."""
    if dtype == torch.bool:
        return d.ints(0, 2, *shape).to(torch.bool)
    if dtype.is_floating_point:
        values = d.ints(-100, 100, *shape).to(torch.float64)
        values = values + d.choice((0.0, 0.5, 0.25)) * d.ints(0, 2, *shape)
        return values.to(dtype)
    low = 0 if dtype == torch.uint8 else -100
    return d.ints(low, 100, *shape).to(dtype)


def _to(value, dtype):
    # torch's own CPU conversion of the source values (the documented rule).
    return value.to(dtype)


def _cast_like(with_flag):
    def draw(d: Draw) -> Case:
        shape = _shape(d, 0, 3)
        source, target = d.choice(EVERY), d.choice(EVERY)
        x = _converted(d, source, *shape)
        if (
            source.is_floating_point
            and not target.is_floating_point
            and target != torch.bool
        ):
            if target == torch.uint8:
                x = x.abs()
        args = (
            [x, False, d.out(*shape, dtype=target)]
            if with_flag
            else [x, d.out(*shape, dtype=target)]
        )

        def exact(a):
            # The reference copy is float64 for float sources: back to the
            # source dtype first (exact), then torch's conversion.
            expected = _to(a[0].to(source), target)
            if target.is_floating_point:
                return {len(a) - 1: (expected.to(torch.float64), torch.zeros(()))}
            return {len(a) - 1: expected}

        return Case(args, exact, ulps=0.0, what=f"{source} -> {target}")

    return Entry(draw, dtypes=(torch.float32,))


def _rearrange(d: Draw) -> Case:
    shape = _shape(d, 0, 3)
    dtype = d.choice(EVERY)
    x = _converted(d, dtype, *shape)
    return Case(
        [x, d.out(*shape, dtype=dtype)],
        lambda a: {
            1: (a[0].to(dtype).to(torch.float64), torch.zeros(()))
            if dtype.is_floating_point
            else a[0]
        },
        ulps=0.0,
    )


def _zeros(d: Draw) -> Case:
    shape = _shape(d, 0, 3)
    dtype = d.choice(EVERY)
    x = _converted(d, dtype, *shape)
    out = _converted(d, dtype, *shape)
    return Case(
        [x, out],
        lambda a: {
            1: torch.zeros(
                shape, dtype=torch.float64 if dtype.is_floating_point else dtype
            )
        },
        ulps=0.0,
    )


def _fill(d: Draw) -> Case:
    shape = _shape(d, 0, 3)
    dtype = d.choice(EVERY)
    if dtype == torch.bool:
        value = d.choice((0.0, 1.0, -2.5, 0.25))
    elif dtype.is_floating_point:
        value = d.choice((0.0, -0.0, 1.0, 2.5, -3.1415926, 1e-3, 65504.0, 1 / 3))
    elif dtype == torch.uint8:
        value = d.choice((0.0, 1.0, 255.0, 7.9))
    else:
        value = d.choice((0.0, -1.0, 100.5, -100.5, 127.0))
    as_tensor = d.coin(0.3)
    argument = torch.tensor(value, dtype=torch.float64) if as_tensor else value
    x = _converted(d, dtype, *shape)

    def reference(a):
        expected = (
            torch.full(shape, value, dtype=torch.float64)
            .to(torch.float32 if dtype in SIXTEEN else torch.float64)
            .to(dtype)
        )
        if dtype.is_floating_point:
            return {2: (expected.to(torch.float64), torch.zeros(()))}
        return {2: expected}

    return Case(
        [x, argument, d.out(*shape, dtype=dtype)], reference, ulps=0.0, frozen={1}
    )


def _cat(d: Draw) -> Case:
    shape = _shape(d, 1, 3, limit=512)
    dim = d.randint(0, len(shape) - 1)
    count = d.randint(1, 4)
    tensors = []
    for _ in range(count):
        member = list(shape)
        member[dim] = d.size(0, 9)
        tensors.append(_values(d, *member))
    if d.coin(0.15):
        tensors.insert(d.randint(0, len(tensors)), torch.empty(0, dtype=d.dtype))
    out_shape = list(shape)
    out_shape[dim] = sum(t.shape[dim] for t in tensors if t.ndim == len(shape))
    signed = dim - len(shape) if d.coin() else dim
    return Case(
        [tensors, signed, d.out(*out_shape)],
        lambda a: {
            2: (
                torch.cat([t for t in a[0] if t.ndim == len(shape)], dim),
                torch.zeros(()),
            )
        },
        ulps=0.0,
    )


def _embedding(d: Draw) -> Case:
    rows, dim = d.size(1, 67), d.size(0, 33)
    index_shape = _shape(d, 0, 2, limit=256)
    ids = d.ints(0, rows, *index_shape, dtype=d.choice(INTS))
    weight = _values(d, rows, dim)
    form = d.randint(0, 2)
    if form == 0:
        args = [ids, weight, d.out(*index_shape, dim)]
    elif form == 1:
        args = [
            ids,
            weight,
            d.choice((None, 0, rows - 1)),
            None,
            2.0,
            False,
            False,
            d.out(*index_shape, dim),
        ]
    else:
        args = [ids, weight, d.choice((-1, 0)), False, False, d.out(*index_shape, dim)]
    return Case(
        args,
        lambda a: {len(a) - 1: (a[1][a[0].long()], torch.zeros(()))},
        ulps=0.0,
    )


def _moe_sum(d: Draw) -> Case:
    tokens, topk, hidden = d.size(0, 33), d.size(1, 9), d.size(0, 67)
    x = _values(d, tokens, topk, hidden)
    if d.coin():
        return Case(
            [x, d.out(tokens, hidden)],
            lambda a: {1: (a[0].sum(1), a[0].abs().sum(1))},
            length=topk,
        )
    experts = d.randint(1, 8)
    ids = d.ints(-1, experts, tokens, topk, dtype=d.choice(INTS))
    expert_map = None
    if d.coin():
        expert_map = d.ints(
            -1, experts, experts + d.randint(0, 2), dtype=d.choice(INTS)
        )

    def reference(a):
        mapped = a[1].long()
        keep = mapped >= 0
        if expert_map is not None:
            inside = mapped < expert_map.shape[0]
            local = torch.full_like(mapped, -1)
            local[keep & inside] = expert_map.long()[mapped[keep & inside]]
            keep = local >= 0
        weights = keep.to(torch.float64)[..., None]
        return {3: ((a[0] * weights).sum(1), (a[0].abs() * weights).sum(1))}

    return Case([x, ids, expert_map, d.out(tokens, hidden)], reference, length=topk)


# -- products -------------------------------------------------------------------


def _product(x, y):
    """(result, magnitude) of a float64 matmul: ``|x| @ |y|`` bounds the
    terms of every sum."""
    return x @ y, x.abs() @ y.abs()


def _gemm(d: Draw) -> Case:
    m, k, n = d.size(0, 67), d.size(0, 67), d.size(0, 67)
    batched = d.coin()
    batch = d.size(1, 9) if batched else None
    trans_a, trans_b = d.coin(), d.coin()
    alpha = d.choice((None, 1.0, 0.5, -2.0))

    def operand(rows, cols, trans):
        rank3 = batched and d.coin(0.8)
        lead = [d.choice((batch, batch, 1))] if rank3 else []
        value = _values(d, *lead, rows, cols)
        return value.transpose(-1, -2).contiguous() if trans else value

    a, b = operand(m, k, trans_a), operand(k, n, trans_b)
    out_rank3 = a.ndim == 3 or b.ndim == 3
    if out_rank3:
        batch_size = max(
            a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1
        )
        if batch_size == 1 and batch:
            batch_size = d.choice((1, batch))  # a batch from neither operand
        out = d.out(batch_size, m, n)
    else:
        out = d.out(m, n)
    short = alpha is None and not trans_a and not trans_b and d.coin()
    args = (
        [a, b, out]
        if short
        else [
            a,
            b,
            None,
            alpha,
            d.choice((None, 0.0, 1.0)),
            int(trans_a) if d.coin() else trans_a,
            int(trans_b),
            out,
        ]
    )
    if not short and not trans_b and d.coin():
        args[6] = None

    def reference(p):
        x, y = p[0], p[1]
        if trans_a:
            x = x.transpose(-1, -2)
        if trans_b:
            y = y.transpose(-1, -2)
        result, magnitude = _product(x, y)
        factor = 1.0 if alpha is None else alpha
        shape = p[-1].shape
        return {
            len(p) - 1: (
                (factor * result).expand(shape),
                (abs(factor) * magnitude).expand(shape),
            )
        }

    return Case(args, reference, length=k)


def _linear(d: Draw) -> Case:
    lead = _shape(d, 0, 3, limit=128)
    k, n = d.size(0, 67), d.size(0, 67)
    x, w = _values(d, *lead, k), _values(d, n, k)
    bias = _values(d, n) if d.coin() else None

    def reference(a):
        result, magnitude = _product(a[0], a[1].T)
        if a[2] is not None:
            result, magnitude = result + a[2], magnitude + a[2].abs()
        return {3: (result, magnitude)}

    return Case([x, w, bias, d.out(*lead, n)], reference, length=k)


def _matmul(d: Draw) -> Case:
    m, k, n = d.size(0, 33), d.size(0, 67), d.size(0, 33)
    form = d.choice(("1x1", "1x2", "2x1", "2x2", "batched"))
    if form == "1x1":
        x, y = _values(d, k), _values(d, k)
    elif form == "1x2":
        x, y = _values(d, k), _values(d, k, n)
    elif form == "2x1":
        x, y = _values(d, m, k), _values(d, k)
    elif form == "2x2":
        x, y = _values(d, m, k), _values(d, k, n)
    else:
        batch = _shape(d, 1, 2, limit=8)
        xb = [d.choice((s, 1)) for s in batch]
        yb = [d.choice((s, 1)) for s in batch]
        if d.coin(0.3):
            yb = yb[1:]
        x, y = _values(d, *xb, m, k), _values(d, *yb, k, n)
    shape = torch.matmul(torch.empty(x.shape), torch.empty(y.shape)).shape
    return Case(
        [x, y, d.out(*shape)],
        lambda a: {2: _product(a[0], a[1])},
        length=k,
        what=form,
    )


# -- convolutions ---------------------------------------------------------------


def _conv(d: Draw, spatial: int, form: str) -> Case:
    """`form`: "convNd" (stride, padding list or string, dilation, groups),
    "infinilm" (padding, stride, dilation) or "convolution" (transposed too)."""
    groups = d.choice((1, 1, 2, 3))
    cin, cout = groups * d.randint(1, 3), groups * d.randint(1, 3)
    batch = d.size(0, 3)
    kernel = [d.randint(1, 3) for _ in range(spatial)]
    stride = [d.randint(1, 2) for _ in range(spatial)]
    dilation = [d.randint(1, 2) for _ in range(spatial)]
    padding = [d.randint(0, 2) for _ in range(spatial)]
    transposed = form == "convolution" and d.coin(0.4)
    output_padding = [0] * spatial
    if transposed:
        output_padding = [
            d.randint(0, max(s, dl) - 1) for s, dl in zip(stride, dilation)
        ]
        sizes = [d.randint(1, 6) for _ in range(spatial)]
        weight_shape = [cin, cout // groups, *kernel]
        # A transposed output has at least one element per dimension.
        padding = [
            min(p, dl * (k - 1) // 2) for p, k, dl in zip(padding, kernel, dilation)
        ]
    else:
        sizes = [(k - 1) * dl + 1 + d.randint(0, 7) for k, dl in zip(kernel, dilation)]
        weight_shape = [cout, cin // groups, *kernel]
    padding_word = None
    if form == "convNd" and d.coin(0.25):
        padding_word = d.choice(("valid", "same"))
        if padding_word == "same":
            stride = [1] * spatial
        padding = (
            [0] * spatial
            if padding_word == "valid"
            else [dl * (k - 1) // 2 for k, dl in zip(kernel, dilation)]
        )
    x = _values(d, batch, cin, *sizes)
    w = _values(d, *weight_shape)
    bias = _values(d, weight_shape[0] if not transposed else cout) if d.coin() else None

    def reference(a):
        if padding_word == "same":
            result = F.__dict__[f"conv{spatial}d"](
                a[0], a[1], a[2], 1, "same", dilation, groups
            )
            magnitude = F.__dict__[f"conv{spatial}d"](
                a[0].abs(),
                a[1].abs(),
                None if a[2] is None else a[2].abs(),
                1,
                "same",
                dilation,
                groups,
            )
        else:

            def run(x, w, b):
                return torch.ops.aten.convolution(
                    x,
                    w,
                    b,
                    stride,
                    padding,
                    dilation,
                    transposed,
                    output_padding,
                    groups,
                )

            result = run(a[0], a[1], a[2])
            magnitude = run(
                a[0].abs(), a[1].abs(), None if a[2] is None else a[2].abs()
            )
        return {len(a) - 1: (result, magnitude)}

    shape = reference(
        [x.double(), w.double(), None if bias is None else bias.double(), None]
    )
    out = d.out(*next(iter(shape.values()))[0].shape)
    if form == "convNd":
        args = [x, w, bias, stride, padding_word or padding, dilation, groups, out]
    elif form == "infinilm":
        args = [x, w, bias, padding, stride, dilation, groups, out]
    else:
        args = [
            x,
            w,
            bias,
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            groups,
            out,
        ]
    length = math.prod(weight_shape[1:]) * (1 if not transposed else 4)
    return Case(args, reference, length=length, what=f"transposed {transposed}")


def _cutlass_scaled_mm(d: Draw) -> Case:
    m, k, n = d.size(0, 33), 16 * d.randint(0, 4), 8 * d.randint(0, 4)
    a = d.ints(-128, 128, m, k, dtype=torch.int8)
    b = d.ints(-128, 128, k, n, dtype=torch.int8)
    per_row, per_col = d.coin(), d.coin()
    scale_a = d.rand(m if per_row else 1, 1, dtype=torch.float32, low=0.01, high=1.0)
    scale_b = d.rand(1, n if per_col else 1, dtype=torch.float32, low=0.01, high=1.0)
    out_dtype = d.choice((torch.float32, *SIXTEEN))
    bias = d.randn(n, dtype=out_dtype) if d.coin() else None

    def reference(p):
        # vLLM's epilogue: float32 ``scale_b * acc``, then ``scale_a * t +
        # bias`` (tests/test_cutlass_scaled_mm.py).
        accumulator = (p[0].long() @ p[1].long()).to(torch.float32)
        scaled = (p[3].to(torch.float32).reshape(1, -1) * accumulator).double()
        value = p[2].reshape(-1, 1) * scaled
        magnitude = value.abs()
        if p[4] is not None:
            value, magnitude = value + p[4], magnitude + p[4].abs()
        return {6: (value, magnitude)}

    return Case(
        [a, b, scale_a, scale_b, bias, out_dtype, d.out(m, n, dtype=out_dtype)],
        reference,
        length=1,
    )


# -- attention ------------------------------------------------------------------


# Attention rounds its scores ``q . k * scale`` in float32 before ``exp``:
# each weight moves by about ``|score|`` ulps (the softmax's conditioning,
# as in `_conditioned`), with scores of a few units here, and ``exp`` is a
# polynomial of a few ulps; 32 ulps of the weighted sum's size covers both
# (8 was exceeded by 1.3x in the fuzz's runs, with no sign of a defect).
ATTENTION_ULPS = 32.0


def _with_magnitude(reference, value_position, logits=None, length=1):
    """(reference, magnitude) where the magnitude is the same attention over
    ``|value|``: the size of the terms of each weighted sum.

    `logits(a)`, where given, bounds the size of the scores the softmax
    sees. Rounding a score of size L moves its weight by about L ulps, so
    the output may be off by L ulps of the magnitude: the magnitude grows by
    ``L / sqrt(length)``, which `close` multiplies back by ``sqrt(length)``.
    """

    def run(a):
        expected = reference(a)
        absolute = list(a)
        absolute[value_position] = a[value_position].abs()
        magnitude = reference(absolute)
        growth = 1.0 if logits is None else 1.0 + logits(a) / math.sqrt(length)
        return {k: (v, magnitude[k] * growth) for k, v in expected.items()}

    return run


def _sdpa(d: Draw) -> Case:
    from tests.test_scaled_dot_product_attention import _reference

    batch, kv_heads = d.size(1, 3), d.randint(1, 3)
    groups = d.randint(1, 3)
    gqa = groups > 1 or d.coin(0.2)
    heads = kv_heads * groups if gqa else kv_heads
    length, keys = d.size(1, 17), d.size(1, 17)
    dim, dim_v = d.size(1, 33), d.size(1, 17)
    q = _values(d, batch, heads, length, dim)
    k = _values(d, batch, kv_heads, keys, dim)
    v = _values(d, batch, kv_heads, keys, dim_v)
    causal = d.coin(0.3)
    mask = None
    if not causal and d.coin(0.3):
        mask = d.ints(0, 2, length, keys).bool() if d.coin() else d.randn(length, keys)
    scale = d.choice((None, 0.5, 1.0))
    out = d.out(batch, heads, length, dim_v)
    if mask is None and not causal and scale is None and not gqa and d.coin():
        args = [q, k, v, out]
    else:
        args = [q, k, v, mask, 0.0, causal, scale, gqa, out]

    def reference(a):
        m = a[3] if len(a) > 4 else None
        return {len(a) - 1: _reference(a[0], a[1], a[2], m, causal, scale, gqa)}

    return Case(
        args,
        _with_magnitude(reference, 2),
        length=max(keys, dim),
        ulps=ATTENTION_ULPS,
        frozen={3},
    )


def _cu(d: Draw, count, low=0, high=9):
    lengths = [d.randint(low, high) for _ in range(count)]
    return lengths, torch.tensor(
        [0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32
    )


def _flash_attention(d: Draw) -> Case:
    from tests.test_flash_attention import reference as flash_reference

    kv_heads, groups = d.randint(1, 2), d.randint(1, 3)
    heads, head_size = kv_heads * groups, d.size(1, 33)
    seqs = d.randint(1, 3)
    lengths_q, cu_q = _cu(d, seqs, 0, 7)
    if d.coin():
        lengths_k, cu_k = _cu(d, seqs, 0, 9)
    else:
        lengths_k, cu_k = lengths_q, None
    if seqs == 1 and d.coin(0.3):
        cu_q_arg = None
        cu_k = None
        lengths_k = lengths_q
    else:
        cu_q_arg = cu_q
    total_q, total_k = sum(lengths_q), sum(lengths_k)
    q = _values(d, total_q, heads, head_size)
    k = _values(d, total_k, kv_heads, head_size)
    v = _values(d, total_k, kv_heads, head_size)
    scale = d.choice((head_size**-0.5, 0.3))
    causal = d.coin()
    left, right = d.choice((-1, -1, 0, 2)), d.choice((-1, -1, 0, 3))
    args = [
        q,
        k,
        v,
        cu_q_arg,
        cu_k,
        None,
        heads,
        kv_heads,
        head_size,
        scale,
        causal,
        left,
        right,
        0,
        d.out(total_q, heads, head_size),
    ]

    def reference(a):
        return {
            14: flash_reference(
                a[0], a[1], a[2], a[3], a[4], None, scale, causal, left, right
            )
        }

    return Case(
        args,
        _with_magnitude(reference, 2),
        length=max(max(lengths_k, default=1), head_size),
        ulps=ATTENTION_ULPS,
    )


def _flash_attn_varlen(d: Draw) -> Case:
    from tests.test_flash_attn_varlen_func import reference as varlen_reference

    kv_heads, groups = d.randint(1, 2), d.randint(1, 3)
    heads, head_size = kv_heads * groups, d.size(1, 33)
    seqs = d.randint(1, 3)
    lengths_q, cu_q = _cu(d, seqs, 0, 7)
    lengths_k, cu_k = _cu(d, seqs, 0, 9)
    q = _values(d, sum(lengths_q), heads, head_size)
    k = _values(d, sum(lengths_k), kv_heads, head_size)
    v = _values(d, sum(lengths_k), kv_heads, head_size)
    max_q, max_k = max(lengths_q), max(lengths_k)
    out = d.out(sum(lengths_q), heads, head_size)
    if d.coin(0.3):
        args = [q, k, v, cu_q, cu_k, max_q, max_k, out]
        scale, causal, window, softcap = None, False, (-1, -1), 0.0
    else:
        scale = d.choice((None, 0.3))
        causal = d.coin()
        window = (d.choice((-1, -1, 1, 4)), d.choice((-1, -1, 0, 2)))
        softcap = d.choice((0.0, 0.0, 5.0))
        args = [
            q,
            k,
            v,
            cu_q,
            cu_k,
            None,
            None,
            max_q,
            max_k,
            0.0,
            scale,
            causal,
            list(window),
            softcap,
            False,
            False,
            out,
            None,
            None,
        ]
    position = 7 if len(args) == 8 else 16

    def reference(a):
        out, _ = varlen_reference(
            a[0], a[1], a[2], cu_q, cu_k, scale, causal, window, softcap, None, None
        )
        return {position: out}

    return Case(
        args,
        _with_magnitude(reference, 2),
        length=max(max_k, head_size, 1),
        ulps=ATTENTION_ULPS,
    )


def _flash_attn_with_kvcache(d: Draw) -> Case:
    from tests.test_flash_attn_with_kvcache import reference as kv_reference

    batch, kv_heads, groups = d.randint(1, 3), d.randint(1, 2), d.randint(1, 2)
    heads, head_size = kv_heads * groups, d.size(1, 17)
    capacity, length_q = d.randint(1, 9), d.randint(1, 3)
    q = _values(d, batch, length_q, heads, head_size)
    k_cache = _values(d, batch, capacity, kv_heads, head_size)
    v_cache = _values(d, batch, capacity, kv_heads, head_size)
    out = d.out(batch, length_q, heads, head_size)
    if d.coin(0.3):
        args = [q, k_cache, v_cache, out]
        options = {}
        position = 3
    else:
        new = d.randint(0, min(2, capacity))
        k = _values(d, batch, new, kv_heads, head_size) if new else None
        v = _values(d, batch, new, kv_heads, head_size) if new else None
        seqlens = d.ints(0, capacity - new + 1, batch, dtype=torch.int32)
        causal = d.coin()
        scale = d.choice((None, 0.4))
        window = [d.choice((-1, -1, 2)), d.choice((-1, -1, 0))]
        softcap = d.choice((0.0, 0.0, 4.0))
        args = [
            q,
            k_cache,
            v_cache,
            k,
            v,
            None,
            None,
            seqlens,
            None,
            None,
            None,
            None,
            scale,
            causal,
            window,
            softcap,
            True,
            0,
            False,
            out,
            None,
        ]
        options = dict(
            k=k,
            v=v,
            cache_seqlens=seqlens,
            softmax_scale=scale,
            causal=causal,
            window_size=tuple(window),
            softcap=softcap,
        )
        position = 19

    def reference(a):
        local = dict(options)
        if "k" in local and local["k"] is not None:
            local["k"], local["v"] = a[3], a[4]
        result = kv_reference(a[0], a[1], a[2], **local)
        out, _lse, k_after, v_after = result[0], result[1], result[2], result[3]
        return {position: out, 1: (k_after, k_after.abs()), 2: (v_after, v_after.abs())}

    def run(a):
        expected = reference(a)
        absolute = list(a)
        absolute[2] = a[2].abs()
        if len(a) > 4 and a[4] is not None:
            absolute[4] = a[4].abs()
        magnitude = reference(absolute)[position]
        expected[position] = (expected[position], magnitude)
        return expected

    return Case(args, run, length=max(capacity, head_size), ulps=ATTENTION_ULPS)


def _paged(d: Draw, prefill: bool) -> Case:
    from tests.test_paged_attention_infinilm import reference as paged_reference

    seqs, kv_heads, groups = d.randint(1, 3), d.randint(1, 2), d.randint(1, 3)
    heads, head_size, block_size = (
        kv_heads * groups,
        d.size(1, 33),
        d.choice((1, 2, 4, 16)),
    )
    seq_lens = [d.randint(0, 20) for _ in range(seqs)]
    if not prefill:
        seq_lens = [max(n, 1) for n in seq_lens]
    max_blocks = max(-(-n // block_size) for n in seq_lens) + d.randint(0, 1)
    max_blocks = max(max_blocks, 1)
    blocks = seqs * max_blocks + d.randint(0, 2)
    k_cache = _values(d, blocks, kv_heads, block_size, head_size)
    v_cache = _values(d, blocks, kv_heads, block_size, head_size)
    order = d.perm(blocks)[: seqs * max_blocks].reshape(seqs, max_blocks)
    tables = order.to(d.choice(INTS))
    lens = torch.tensor(seq_lens, dtype=d.choice(INTS))
    slopes = d.rand(heads, dtype=torch.float32) if d.coin(0.3) else None
    scale = d.choice((head_size**-0.5, 0.2))
    if prefill:
        queries = [d.randint(0, n) for n in seq_lens]
        cum = torch.tensor(
            [0, *torch.tensor(queries).cumsum(0).tolist()],
            dtype=torch.int32 if d.coin() else torch.int64,
        )
        tokens = sum(queries)
    else:
        cum = None
        tokens = seqs
    q = _values(d, tokens, heads, head_size)
    out = d.out(tokens, heads, head_size)
    if prefill:
        args = [q, k_cache, v_cache, tables, lens, cum, slopes, scale, out]
    else:
        args = [q, k_cache, v_cache, tables, lens, slopes, scale, out]

    def reference(a):
        return {
            len(a) - 1: paged_reference(
                a[0],
                a[1],
                a[2],
                tables,
                lens,
                cum,
                None if slopes is None else a[-3],
                scale,
            )
        }

    def logits(a):
        # Every query against every cached key (a bound on the scores of
        # each head), plus the largest ALiBi offset.
        keys = a[1].double().reshape(-1, head_size)
        scores = a[0].double().reshape(-1, head_size) @ keys.T
        largest = scale * scores.abs().max().item() if scores.numel() else 0.0
        if slopes is not None:
            largest += a[-3].abs().max().item() * max(seq_lens)
        return largest

    length = max(max(seq_lens), head_size, 1)
    return Case(
        args,
        _with_magnitude(reference, 2, logits, length),
        length=length,
        ulps=ATTENTION_ULPS,
    )


# -- caches and positions ---------------------------------------------------------


def _kv_caching(d: Draw) -> Case:
    batch, heads, new, head_size = (
        d.size(0, 3),
        d.randint(1, 3),
        d.randint(0, 4),
        d.size(1, 17),
    )
    capacity = new + d.randint(0, 5)
    k, v = (
        _values(d, batch, heads, new, head_size),
        _values(d, batch, heads, new, head_size),
    )
    past = d.ints(0, capacity - new + 1, batch, dtype=d.choice(INTS))
    k_cache = _values(d, batch, heads, capacity, head_size)
    v_cache = _values(d, batch, heads, capacity, head_size)

    def reference(a):
        kc, vc = a[3].clone(), a[4].clone()
        for b in range(batch):
            start = int(past[b])
            kc[b, :, start : start + new] = a[0][b]
            vc[b, :, start : start + new] = a[1][b]
        return {3: (kc, 0.0 * kc), 4: (vc, 0.0 * vc)}

    return Case([k, v, past, k_cache, v_cache], reference, ulps=0.0)


def _slots(d: Draw, tokens, places):
    slots = d.perm(places)[:tokens]
    if tokens and d.coin(0.3):
        slots[d.randint(0, tokens - 1)] = -1
    return slots.to(d.choice(INTS))


def _paged_caching(d: Draw) -> Case:
    blocks, heads, block_size, head_size = (
        d.randint(1, 4),
        d.randint(1, 3),
        d.choice((1, 2, 4, 8)),
        d.size(1, 17),
    )
    tokens = d.randint(0, blocks * block_size)
    slots = _slots(d, tokens, blocks * block_size)
    k, v = _values(d, tokens, heads, head_size), _values(d, tokens, heads, head_size)
    k_cache = _values(d, blocks, heads, block_size, head_size)
    v_cache = _values(d, blocks, heads, block_size, head_size)

    def reference(a):
        kc, vc = a[3].clone(), a[4].clone()
        for t, slot in enumerate(slots.tolist()):
            if slot >= 0:
                kc[slot // block_size, :, slot % block_size] = a[0][t]
                vc[slot // block_size, :, slot % block_size] = a[1][t]
        return {3: (kc, 0.0 * kc), 4: (vc, 0.0 * vc)}

    return Case([k, v, slots, k_cache, v_cache], reference, ulps=0.0)


def _reshape_and_cache(flash: bool):
    def draw(d: Draw) -> Case:
        blocks, heads, block_size = (
            d.randint(1, 3),
            d.randint(1, 3),
            d.choice((1, 2, 4, 8)),
        )
        x = 16 // torch.empty((), dtype=d.dtype).element_size()
        head_size = x * d.randint(1, 3)
        tokens = d.randint(0, blocks * block_size)
        slots = _slots(d, tokens, blocks * block_size)
        key, value = (
            _values(d, tokens, heads, head_size),
            _values(d, tokens, heads, head_size),
        )
        scale = torch.ones(1)
        if flash:
            key_cache = _values(d, blocks, block_size, heads, head_size)
            value_cache = _values(d, blocks, block_size, heads, head_size)
            args = [
                key,
                value,
                slots,
                scale,
                scale.clone(),
                "auto",
                key_cache,
                value_cache,
            ]
            kp, vp = 6, 7
        else:
            key_cache = _values(d, blocks, heads, head_size // x, block_size, x)
            value_cache = _values(d, blocks, heads, head_size, block_size)
            args = [
                key,
                value,
                key_cache,
                value_cache,
                slots,
                scale,
                scale.clone(),
                "auto",
            ]
            kp, vp = 2, 3

        def reference(a):
            kc, vc = a[kp].clone(), a[vp].clone()
            for t, slot in enumerate(slots.tolist()):
                if slot < 0:
                    continue
                b, o = slot // block_size, slot % block_size
                if flash:
                    kc[b, o], vc[b, o] = a[0][t], a[1][t]
                else:
                    kc[b, :, :, o, :] = a[0][t].reshape(heads, head_size // x, x)
                    vc[b, :, :, o] = a[1][t]
            return {kp: (kc, 0.0 * kc), vp: (vc, 0.0 * vc)}

        return Case(args, reference, ulps=0.0)

    return Entry(draw)


def _rotary_embedding(d: Draw) -> Case:
    from tests.test_rotary_embedding import _torch_rotary_embedding

    tokens, head_size = d.size(0, 9), 2 * d.randint(1, 16)
    rot_dim = 2 * d.randint(1, head_size // 2)
    offset = d.choice((0, 0, head_size - rot_dim))
    heads, kv_heads = d.randint(1, 3), d.randint(1, 2)
    max_position = d.randint(1, 16)
    positions = d.ints(0, max_position, tokens, dtype=d.choice(INTS))
    query = _values(d, tokens, heads * head_size)
    key = _values(d, tokens, kv_heads * head_size) if d.coin(0.8) else None
    cache = d.randn(max_position, rot_dim, dtype=d.choice((d.dtype, torch.float32)))
    is_neox, inverse = d.coin(), d.coin(0.3)
    args = [positions, query, key, cache, head_size, is_neox]
    if offset or inverse or d.coin():
        args += [offset, inverse]

    def reference(a):
        rotated = _torch_rotary_embedding(
            a[0], a[1], a[2], a[3], head_size, is_neox, offset, inverse, None
        )
        # Each result is ``x cos -+ y sin``: its terms are bounded by the
        # token's largest input times its largest cache entry.
        largest = a[3][a[0].long()].abs().amax(-1, keepdim=True) if tokens else 0.0
        result = {1: (rotated[0], a[1].abs().amax(-1, keepdim=True) * largest)}
        if a[2] is not None:
            result[2] = (rotated[1], a[2].abs().amax(-1, keepdim=True) * largest)
        return result

    return Case(args, reference, length=2)


def _rotary_embedding_infinilm(d: Draw) -> Case:
    from tests.test_rotary_embedding_infinilm import (
        _torch_rotary_embedding_infinilm as rope,
    )

    tokens, heads, half = d.size(0, 9), d.randint(1, 3), d.randint(1, 16)
    max_position = d.randint(1, 16)
    x = _values(d, tokens, heads, 2 * half)
    pos = d.ints(0, max_position, tokens, dtype=d.choice(INTS))
    table_dtype = d.choice((d.dtype, torch.float32))
    sin, cos = (
        d.randn(max_position, half, dtype=table_dtype),
        d.randn(max_position, half, dtype=table_dtype),
    )
    is_neox = d.coin()

    def reference(a):
        expected = rope(a[0], a[1], a[2], a[3], is_neox, a[5], None)
        tables = torch.maximum(a[2].abs(), a[3].abs())[a[1].long()]
        largest = tables.amax(-1)[:, None, None] if tokens else 0.0
        return {5: (expected, a[0].abs().amax(-1, keepdim=True) * largest)}

    return Case(
        [x, pos, sin, cos, is_neox, d.out(tokens, heads, 2 * half)], reference, length=2
    )


# -- quantised weights ------------------------------------------------------------


def _seeded(d: Draw):
    """A fork of torch's global generator seeded from the case, for the
    test helpers that draw from it."""
    fork = torch.random.fork_rng()
    fork.__enter__()
    torch.manual_seed(d.randint(0, 2**31))
    return fork


def _dequantize_blockwise_8bit(d: Draw) -> Case:
    shape = _shape(d, 1, 2, limit=512)
    blocksize = d.choice((1, 7, 64, 256))
    count = math.prod(shape)
    input = d.ints(0, 256, *shape, dtype=torch.uint8)
    absmax = d.rand(-(-count // blocksize), dtype=torch.float32)
    code = d.randn(256, dtype=torch.float32)

    def reference(a):
        flat = a[2][a[0].reshape(-1).long()] * a[1].repeat_interleave(blocksize)[:count]
        return {4: flat.reshape(shape)}

    return Case([input, absmax, code, blocksize, d.out(*shape)], reference, ulps=1.0)


def _dequantize_nf4(d: Draw) -> Case:
    from tests.test_dequantize_nf4 import _reference

    shape = _shape(d, 1, 2, limit=512)
    shape[-1] = 2 * max(shape[-1] // 2, 0)
    count = math.prod(shape)
    blocksize = d.choice((2, 64, 128))
    input = d.ints(0, 256, count // 2, dtype=torch.uint8)
    absmax = d.rand(
        max(-(-count // blocksize), 0), dtype=torch.float32, low=0.25, high=1.25
    )
    return Case(
        [input, absmax, blocksize, d.out(*shape)],
        lambda a: {3: _reference(a[0], a[1], blocksize, shape)},
        ulps=1.0,
    )


def _ggml_dequantize(d: Draw) -> Case:
    from tests._ggml import TYPES, blocks, dequantized, odd_columns

    quant_type = d.choice(TYPES)
    rows = d.size(0, 9)
    cols = odd_columns(quant_type) // 3 * d.randint(1, 3)
    weight = blocks(quant_type, max(rows, 1), cols, d.randint(0, 10**6))
    values = dequantized(weight, quant_type)[:rows]
    return Case(
        [weight, quant_type, rows, cols, d.out(rows, cols)],
        lambda a: {4: values.double()},
        ulps=1.0,
        what=f"type {quant_type}",
    )


def _ggml_product(d: Draw) -> Case:
    from tests._ggml import TYPES, blocks, dequantized, odd_columns

    quant_type = d.choice(TYPES)
    # At least one token: `tests/_ggml.check_product` reshapes per token.
    rows, tokens = d.size(1, 17), d.size(1, 9)
    cols = odd_columns(quant_type) // 3 * d.randint(1, 3)
    weight = blocks(quant_type, rows, cols, d.randint(0, 10**6))
    values = dequantized(weight, quant_type)
    x = d.randn(tokens, cols)
    return Case(
        [weight, x, quant_type, rows, d.out(tokens, rows)],
        None,
        check=_product_check(values),
        what=f"type {quant_type}",
    )


def _product_check(values):
    """The check of a GGML product's case: `tests._ggml.check_product`
    against the dequantised weight `values`."""
    from tests._ggml import check_product

    def check(call):
        try:
            check_product(call[4], call[1].to(torch.float32), values)
        except AssertionError as error:
            return f"`out`: {error}"
        return None

    return check


def _ggml_interleaved_product(d: Draw) -> Case:
    """`_ggml_product` over the interleaved weight: the same bound."""
    from infini.ops.native.cpu.ggml_interleaved import interleave
    from tests._ggml import blocks, dequantized

    quant_type = d.choice((2, 3, 6, 7, 8, 12, 14))
    tiles, tokens = d.size(1, 3), d.size(1, 20)
    rows = 8 * tiles - d.randint(0, 7)
    block = 256 if quant_type in (12, 14) else 32
    cols = block * d.randint(1, 3)
    weight = blocks(quant_type, 8 * tiles, cols, d.randint(0, 10**6))
    values = dequantized(weight, quant_type)[:rows]
    # The layout's own function (`tests/_valid_calls.py` says why).
    interleaved = torch.from_numpy(interleave(weight.numpy(), quant_type))
    x = d.randn(tokens, cols)
    return Case(
        [interleaved, x, quant_type, rows, d.out(tokens, rows)],
        None,
        check=_product_check(values),
        what=f"type {quant_type}",
    )


def _ggml_interleave(d: Draw) -> Case:
    """The layout is checked byte by byte in `tests/test_ggml_interleave.py`;
    here: putting the result back (`deinterleave`, the inverse the tiled
    product uses) gives the weight."""
    from infini.ops.native.cpu.ggml_interleaved import deinterleave
    from tests._ggml import blocks

    quant_type = d.choice((2, 3, 6, 7, 8, 12, 14))
    tiles = d.size(0, 3)
    cols = (256 if quant_type in (12, 14) else 32) * d.randint(1, 3)
    weight = blocks(quant_type, max(8 * tiles, 8), cols, d.randint(0, 10**6))
    weight = weight[: 8 * tiles]
    out = torch.empty_like(weight)

    def check(call):
        back = torch.empty_like(weight)
        if tiles:
            deinterleave(call[2].numpy(), quant_type, back.numpy())
        if not torch.equal(back, weight):
            return "`out`: does not put back into the weight"
        return None

    return Case([weight, quant_type, out], None, check=check, what=f"type {quant_type}")


def _marlin_repack(kind):
    def draw(d: Draw) -> Case:
        from tests._marlin import awq_pack, gptq_pack, marlin_unpack

        bits, is_a_8bit = d.choice((4, 8)), d.coin(0.3)
        size_k = (32 if is_a_8bit else 16) * d.randint(0, 4)
        size_n = 64 * d.randint(1, 3)
        weight = d.ints(0, 1 << bits, size_k, size_n)
        pack = 32 // bits
        out = d.out(size_k // 16, size_n * 16 // pack, dtype=torch.int32)
        if kind == "awq":
            args = [awq_pack(weight, bits), size_k, size_n, bits, is_a_8bit, out]
            expected = weight
        else:
            perm = (
                d.perm(size_k, torch.int32)
                if d.coin()
                else torch.empty(0, dtype=torch.int32)
            )
            args = [gptq_pack(weight, bits), perm, size_k, size_n, bits, is_a_8bit, out]
            expected = weight[perm.long()] if perm.numel() else weight

        def check(call):
            got = marlin_unpack(call[-1].contiguous(), size_k, size_n, bits, is_a_8bit)
            if not torch.equal(got, expected):
                return "`out` does not unpack to the weight"
            return None

        return Case(args, None, check=check, what=f"{bits} bits, a8 {is_a_8bit}")

    return Entry(draw, dtypes=(torch.float32,), group="quantised", layouts="offset")


def _moe_wna16_gemm(d: Draw) -> Case:
    from tests._valid_calls import _aligned
    from tests.test_moe_wna16_gemm import _quantised, _reference

    bit = d.choice((4, 8))
    experts, top_k = d.randint(1, 4), 1
    top_k = d.randint(1, experts)
    group = d.choice((16, 32, 64))
    k = group * d.randint(1, 3)
    n = 2 * d.randint(1, 12)
    tokens = d.size(0, 9)
    with_zeros, with_weights = d.coin(), d.coin()
    block_m = d.choice((1, 4, 5, 16))
    fork = _seeded(d)
    try:
        packed, scales, zeros, weights = _quantised(
            experts, n, k, group, bit, with_zeros, d.dtype
        )
        topk_ids = (
            torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)]).int()
            if tokens
            else torch.empty(0, top_k, dtype=torch.int32)
        )
        topk_weights = torch.rand(tokens, top_k) if with_weights else None
    finally:
        fork.__exit__(None, None, None)
    sorted_ids, expert_ids, post_pad = _aligned(topk_ids, experts, block_m)
    x = d.randn(tokens, k)
    args = [
        x,
        packed,
        scales,
        zeros,
        topk_weights,
        sorted_ids,
        expert_ids,
        post_pad,
        top_k,
        block_m,
        16,
        group,
        bit,
        d.out(tokens, top_k, n),
    ]

    def reference(a):
        expected = _reference(a[0], weights, topk_ids, topk_weights)
        magnitude = _reference(a[0].abs(), weights.abs(), topk_ids, topk_weights)
        return {13: (expected, magnitude)}

    # The reference reads the scales and zero points drawn here: no
    # expanded copies of them.
    return Case(args, reference, length=k, frozen={1, 2, 3, 4})


def _moe_wna16_marlin_gemm(d: Draw) -> Case:
    from tests._valid_calls import _aligned
    from tests.test_moe_wna16_marlin_gemm import TYPES, _model, _reference

    type_name = d.choice(tuple(TYPES))
    experts, tokens = d.randint(1, 3), d.size(0, 9)
    top_k = d.randint(1, experts)
    size_k, size_n = 64 * d.randint(1, 2), 64 * d.randint(1, 2)
    groups = d.choice((1, 2))
    bias, act_order = d.coin(), d.coin(0.3) and not TYPES[type_name][3] and groups > 1
    mul = d.coin()
    block = d.choice((8, 16, 32, 64))
    fork = _seeded(d)
    try:
        model = _model(
            type_name,
            d.dtype,
            experts,
            size_k,
            size_n,
            groups,
            bias=bias,
            act_order=act_order,
        )
        topk_ids = (
            torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)]).int()
            if tokens
            else torch.empty(0, top_k, dtype=torch.int32)
        )
        topk_weights = torch.rand(tokens, top_k)
    finally:
        fork.__exit__(None, None, None)
    sorted_ids, expert_ids, padded = _aligned(topk_ids, experts, block)
    a = d.randn(tokens, size_k)
    workspace = torch.zeros(64, dtype=torch.int32)
    args = [a, model.b_q_weight, model.b_bias, model.b_scales, None, None,
            model.b_zeros, model.sorted_g_idx, model.perm, workspace, sorted_ids,
            expert_ids, padded, topk_weights, block, top_k, mul,
            TYPES[type_name][0], tokens, size_n, size_k, True, False, True, False,
            -1, -1, -1, d.out(tokens * top_k, size_n)]  # fmt: skip

    def reference(p):
        expected = _reference(p[0], model, topk_ids, topk_weights, top_k, mul)
        magnitude = _reference(p[0].abs(), model, topk_ids, topk_weights, top_k, mul)
        return {28: (expected, magnitude.abs() + expected.abs())}

    return Case(
        args, reference, length=size_k, frozen=set(range(1, 28)), what=type_name
    )


# -- routing and sampling ---------------------------------------------------------


def _distinct(d: Draw, tokens, experts, dtype=None):
    """Rows without ties, exact in every float dtype: permutations of
    multiples of 1/32 (tests/_routing.distinct_scores, from the case's
    generator)."""
    rows = [d.perm(experts) for _ in range(tokens)]
    values = torch.stack(rows) if rows else torch.empty(0, experts, dtype=torch.long)
    return ((values.to(torch.float32) - experts // 2) / 32).to(dtype or d.dtype)


def _get_cutlass_moe_mm_data(d: Draw) -> Case:
    from tests.test_get_cutlass_moe_mm_data import _reference

    tokens, topk, experts = d.size(0, 33), d.randint(1, 4), d.randint(1, 9)
    ids = d.ints(-1, experts + 1, tokens, topk, dtype=torch.int32)
    n, k, gated = 16 * d.randint(1, 4), 16 * d.randint(1, 4), d.coin()
    blockscale = d.coin()
    entries = tokens * topk
    i32 = torch.int32
    outputs = [d.out(experts + 1, dtype=i32), d.out(experts, 3, dtype=i32),
               d.out(experts, 3, dtype=i32), d.out(entries, dtype=i32),
               d.out(entries, dtype=i32)]  # fmt: skip
    args = [ids, experts, n, k, gated, *outputs]
    if blockscale:
        args.append(d.out(experts + 1, dtype=torch.int32))

    def reference(a):
        expected = _reference(ids, experts, n, k, gated, blockscale)
        total = int(expected[0][-1])
        input_permutation = torch.full((entries,), -7, dtype=torch.int32)
        input_permutation[:total] = expected[3]
        result = {
            5: expected[0],
            6: expected[1],
            7: expected[2],
            8: input_permutation,
            9: expected[4],
        }
        if blockscale:
            result[10] = expected[5]
        return result

    return Case(args, reference)


def _moe_align_block_size(d: Draw) -> Case:
    from tests.test_moe_align_block_size import _reference

    tokens, topk, experts = d.size(0, 33), d.randint(1, 4), d.randint(1, 9)
    block = d.choice((1, 2, 4, 16))
    ids = d.ints(-1, experts + 1, tokens, topk, dtype=d.choice(INTS))
    expert_map = (
        d.ints(-1, experts, experts + 1, dtype=torch.int32) if d.coin(0.3) else None
    )
    sorted_len = ids.numel() + experts * (block - 1)
    blocks = -(-sorted_len // block)
    dtype = d.choice(INTS)
    args = [
        ids,
        expert_map,
        experts,
        block,
        d.out(sorted_len, dtype=dtype),
        d.out(blocks, dtype=dtype),
        d.out(1, dtype=dtype),
    ]

    def reference(a):
        sorted_ids, expert_ids, total = _reference(
            ids, expert_map, experts, block, sorted_len, blocks
        )
        return {4: sorted_ids, 5: expert_ids, 6: torch.tensor([total])}

    return Case(args, reference)


def _grouped_topk(d: Draw) -> Case:
    from tests.test_grouped_topk import _torch_grouped_topk

    groups = d.choice((1, 2, 4))
    experts = groups * d.choice((2, 4, 8))
    topk_group = d.randint(1, groups)
    topk = d.randint(1, topk_group * experts // groups)
    tokens = d.size(0, 17)
    renormalize, scale, func = d.coin(), d.choice((1.0, 2.5)), d.choice((0, 1))
    bias = torch.zeros(experts, dtype=d.choice((d.dtype, torch.float32)))

    def ambiguous(row):
        # Groups rank by the sum of their two best scores: two groups whose
        # sums at the selection boundary agree to rounding make either
        # choice right, so such a row is drawn again.
        s = row.double()
        s = torch.sigmoid(s) if func == 1 else s
        sums = s.view(groups, -1).topk(2, dim=-1).values.sum(-1)
        ranked = sums.sort(descending=True).values
        return topk_group < groups and bool(
            (ranked[topk_group - 1] - ranked[topk_group]).abs() < 1e-5
        )

    rows = []
    for _ in range(tokens):
        for _ in range(100):
            # Positive, so that a renormalised row never sums to 0 (func 0
            # takes the scores as they are).
            row = _distinct(d, 1, experts)[0] + experts // 2 / 32 + 1 / 32
            row = row.to(d.dtype)
            if not ambiguous(row):
                break
        rows.append(row)
    scores = torch.stack(rows) if rows else torch.empty(0, experts, dtype=d.dtype)
    values = d.out(tokens, topk, dtype=torch.float32)
    indices = d.out(tokens, topk, dtype=d.choice(INTS))
    args = [
        scores,
        bias,
        groups,
        topk_group,
        topk,
        renormalize,
        scale,
        func,
        values,
        indices,
    ]

    def reference(a):
        weights, ids = _torch_grouped_topk(
            scores,
            bias,
            groups,
            topk_group,
            topk,
            renormalize,
            scale,
            func,
            values.double(),
            indices,
        )
        return {8: (weights, weights.abs()), 9: ids}

    return Case(args, reference, length=topk, frozen={0, 1})


def _topk_gating(scoring):
    def draw(d: Draw) -> Case:
        from tests._routing import token_expert_indices, topk_gating_reference

        tokens, experts = d.size(0, 17), d.choice((1, 2, 3, 8, 16, 64))
        topk = d.randint(1, experts)
        gating = _distinct(d, tokens, experts)
        bias = _distinct(d, 1, experts, torch.float32)[0] / 64 if d.coin(0.3) else None
        padding = d.ints(0, 2, tokens).bool() if d.coin(0.3) else None
        renormalize = d.coin()
        scale = d.choice((1.0, 2.5)) if scoring == "sigmoid" else 1.0
        weight_dtype = d.choice((torch.float32, d.dtype))
        id_dtype = d.choice(INTS)
        outputs = [
            d.out(tokens, topk, dtype=weight_dtype),
            d.out(tokens, topk, dtype=id_dtype),
            d.out(tokens, topk, dtype=d.choice(INTS)),
        ]
        if scoring == "sigmoid":
            args = [gating, bias, padding, renormalize, scale, *outputs]
        else:
            args = [gating, bias, padding, renormalize, *outputs]
        first = len(args) - 3

        def reference(a):
            weights, ids = topk_gating_reference(
                gating, bias, padding, renormalize, scale, topk, scoring, id_dtype
            )
            return {
                first: (weights, weights.abs()),
                first + 1: ids,
                first + 2: token_expert_indices(tokens, topk),
            }

        return Case(args, reference, length=experts, frozen={0, 1, 2})

    return Entry(draw, dtypes=(torch.float32, *SIXTEEN))


def _topksoftmax_infinilm(d: Draw) -> Case:
    tokens, experts = d.size(0, 17), d.choice((1, 2, 8, 16, 64))
    topk = d.randint(1, experts)
    x = _distinct(d, tokens, experts)
    norm = d.coin()
    values = d.out(tokens, topk, dtype=d.choice((torch.float32, d.dtype)))
    indices = d.out(tokens, topk, dtype=d.choice(INTS))

    def reference(a):
        result = torch.softmax(x.double(), 1).topk(topk, 1)
        selected = result.values
        if norm:
            selected = selected / selected.sum(1, keepdim=True)
        return {3: (selected, selected.abs()), 4: result.indices}

    return Case([x, topk, norm, values, indices], reference, length=experts, frozen={0})


def _random_sample(d: Draw) -> Case:
    from tests.test_random_sample_infinilm import _torch_random_sample

    vocab = d.size(1, 67) * d.choice((1, 1, 30))
    logits = _distinct(d, 1, vocab)[0] * d.choice((1.0, 8.0))
    random_val = d.choice((0.0, 0.1, 0.5, 0.73, 0.999))
    topp, topk = d.choice((0.0, 0.3, 0.9, 1.0)), d.choice((1, 2, 5, 50, 100000))
    temperature = d.choice((0.0, 0.5, 1.0, 2.0))
    expected = _torch_random_sample(logits, random_val, topp, topk, temperature)
    return Case(
        [logits, random_val, topp, topk, temperature, d.out(dtype=torch.int64)],
        lambda a: {5: torch.tensor(expected)},
        frozen={0},
    )


def _sampler(kind):
    def draw(d: Draw) -> Case:
        from tests._sampling import allowed_tokens

        rows, vocab = d.size(0, 9), d.size(1, 67)
        logits = _distinct(d, rows, vocab) * d.choice((1.0, 16.0))
        k = d.ints(0, vocab + 2, rows) if d.coin(0.8) else None
        p = (
            d.rand(rows, dtype=torch.float32, low=0.05, high=1.0)
            if d.coin(0.8)
            else None
        )
        joint = False
        out = d.out(rows, dtype=torch.int64)
        picked = torch.arange(rows)
        if kind == "sampler":
            args = [logits, k, p, out]
        elif kind == "infinilm":
            args = [logits, k, p, d.randint(0, 1000), d.randint(0, 10), out]
        else:
            k = d.ints(0, vocab + 2, rows)
            p = d.rand(rows, dtype=torch.float32, low=0.05, high=1.0)
            order = d.choice(("top_k_first", "joint"))
            joint = order == "joint"
            indices = d.perm(rows) if d.coin() else None
            if indices is not None:
                picked = indices
            args = [
                logits,
                k,
                p,
                indices,
                order,
                d.coin(),
                False,
                d.randint(0, 1000),
                d.randint(0, 10),
                out,
            ]

        def check(call):
            got = call[-1]
            for row in range(rows):
                source = logits[int(picked[row])]
                row_k = vocab if k is None else int(k[row])
                row_p = 1.0 if p is None else float(p[row])
                allowed = allowed_tokens(source.to(torch.float32), row_k, row_p, joint)
                if int(got[row]) not in allowed:
                    return (
                        f"`out[{row}]` = {int(got[row])} is not among the kept "
                        f"tokens {sorted(allowed)[:20]}"
                    )
            return None

        return Case(args, None, check=check, frozen=set(range(len(args))))

    return Entry(draw)


FUZZ: dict[str, Entry] = {
    "add": Entry(_add),
    "add_rms_norm": Entry(_add_rms_norm),
    "cast": _cast_like(False),
    "cat": Entry(_cat),
    "causal_softmax": _softmax_like("causal"),
    "causal_softmax_infinilm": _softmax_like("causal"),
    "copy": _cast_like(True),
    "embedding": Entry(_embedding, dtypes=(torch.float32, *SIXTEEN)),
    "fill": Entry(_fill, dtypes=(torch.float32,)),
    "fused_add_rms_norm": Entry(_fused_add_rms_norm),
    "gelu": _unary(_gelu, scalars=(("none", "tanh"),), magnitude=torch.abs),
    "gelu_infinilm": _unary(_gelu, scalars=(("none", "tanh"),), magnitude=torch.abs),
    "gelutanh_infinilm": _unary(
        lambda x: F.gelu(x, approximate="tanh"), magnitude=torch.abs
    ),
    "gemm": Entry(_gemm, group="products"),
    "linear": Entry(_linear, group="products"),
    "matmul": Entry(_matmul, group="products"),
    "moe_sum": Entry(_moe_sum, dtypes=(torch.float32, *SIXTEEN)),
    "mul": _binary(torch.mul, lambda a, b: (a * b).abs()),
    "rearrange_infinilm": Entry(_rearrange, dtypes=(torch.float32,)),
    "relu": _unary(torch.relu, ulps=0.0),
    "relu_infinilm": _unary(torch.relu, ulps=0.0),
    "rms_norm": Entry(_rms_norm),
    "scaled_softmax": _softmax_like("scaled"),
    "scaled_softmax_infinilm": _softmax_like("scaled"),
    "sigmoid": _unary(torch.sigmoid),
    "sigmoid_infinilm": _unary(torch.sigmoid),
    "silu": _unary(F.silu),
    "silu_and_mul": _gated(F.silu),
    "silu_and_mul_infinilm": _gated(F.silu),
    "gelu_tanh_and_mul": _gated(lambda x: F.gelu(x, approximate="tanh")),
    "softmax": _softmax_like("softmax"),
    "softmax_infinilm": _softmax_like("softmax"),
    "swiglu": _binary(lambda a, b: a * F.silu(b), lambda a, b: (a * F.silu(b)).abs()),
    "zeros_infinilm": Entry(_zeros, dtypes=(torch.float32,)),
    "conv1d": Entry(lambda d: _conv(d, 1, "convNd"), group="products"),
    "conv2d": Entry(lambda d: _conv(d, 2, "convNd"), group="products"),
    "conv3d": Entry(lambda d: _conv(d, 3, "convNd"), group="products"),
    "conv_infinilm": Entry(lambda d: _conv(d, 2, "infinilm"), group="products"),
    "convolution": Entry(
        lambda d: _conv(d, d.choice((1, 2)), "convolution"), group="products"
    ),
    "cutlass_scaled_mm": Entry(
        _cutlass_scaled_mm, dtypes=(torch.float32,), group="products"
    ),
    "scaled_dot_product_attention": Entry(_sdpa, group="attention"),
    "flash_attention": Entry(
        _flash_attention, dtypes=(torch.float32, *SIXTEEN), group="attention"
    ),
    "flash_attn_varlen_func": Entry(
        _flash_attn_varlen, dtypes=(torch.float32, *SIXTEEN), group="attention"
    ),
    "flash_attn_with_kvcache": Entry(
        _flash_attn_with_kvcache, dtypes=(torch.float32, *SIXTEEN), group="attention"
    ),
    "paged_attention_infinilm": Entry(lambda d: _paged(d, False), group="attention"),
    "paged_attention_prefill_infinilm": Entry(
        lambda d: _paged(d, True), group="attention"
    ),
    "kv_caching_infinilm": Entry(_kv_caching),
    "paged_caching_infinilm": Entry(_paged_caching),
    "reshape_and_cache": _reshape_and_cache(False),
    "reshape_and_cache_flash": _reshape_and_cache(True),
    "rotary_embedding": Entry(_rotary_embedding),
    "rotary_embedding_infinilm": Entry(_rotary_embedding_infinilm),
    "dequantize_blockwise_8bit": Entry(
        _dequantize_blockwise_8bit, dtypes=(torch.float32, *SIXTEEN), layouts="offset"
    ),
    "dequantize_nf4": Entry(
        _dequantize_nf4, dtypes=(torch.float32, *SIXTEEN), layouts="offset"
    ),
    "ggml_dequantize": Entry(
        _ggml_dequantize, dtypes=(torch.float32, *SIXTEEN), group="quantised"
    ),
    "ggml_interleave": Entry(
        _ggml_interleave, dtypes=(torch.float32,), group="quantised"
    ),
    "ggml_mul_mat_a8": Entry(
        _ggml_product, dtypes=(torch.float32, *SIXTEEN), group="quantised"
    ),
    "ggml_mul_mat_interleaved_a8": Entry(
        _ggml_interleaved_product,
        dtypes=(torch.float32, *SIXTEEN),
        group="quantised",
    ),
    "ggml_mul_mat_vec_a8": Entry(
        _ggml_product, dtypes=(torch.float32, *SIXTEEN), group="quantised"
    ),
    "awq_marlin_repack": _marlin_repack("awq"),
    "gptq_marlin_repack": _marlin_repack("gptq"),
    "moe_wna16_gemm": Entry(
        _moe_wna16_gemm, dtypes=(torch.float32, *SIXTEEN), group="quantised"
    ),
    "moe_wna16_marlin_gemm": Entry(
        _moe_wna16_marlin_gemm, dtypes=SIXTEEN, group="quantised", layouts="offset"
    ),
    "get_cutlass_moe_mm_data": Entry(_get_cutlass_moe_mm_data, dtypes=(torch.float32,)),
    "moe_align_block_size": Entry(_moe_align_block_size, dtypes=(torch.float32,)),
    "grouped_topk": Entry(_grouped_topk, dtypes=(torch.float32, *SIXTEEN)),
    "topk_sigmoid": _topk_gating("sigmoid"),
    "topk_softmax": _topk_gating("softmax"),
    "topksoftmax_infinilm": Entry(
        _topksoftmax_infinilm, dtypes=(torch.float32, *SIXTEEN)
    ),
    "random_sample_infinilm": Entry(_random_sample, dtypes=(torch.float32, *SIXTEEN)),
    "top_k_top_p_sampler": _sampler("sampler"),
    "top_k_top_p_sample_infinilm": _sampler("infinilm"),
    "top_k_top_p_sampling_from_logits": _sampler("from_logits"),
}

# Cases per operator and slot in the normal run (INFINI_OPS_FUZZ_CASES
# overrides them all): about a minute for the whole module on two workers.
CASES = {"default": 8}
