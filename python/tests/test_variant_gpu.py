"""GPU tests of attention variants through kgen.torch: o and lse of every preset and of user
expressions against a float64 reference built here from the formulas (docs/attention.md §8), with
the pass rule of docs/attention.md §5.2 including the row rule, on NaN-poisoned outputs; kgen's
error against PyTorch FlexAttention's for the same variant where FlexAttention runs; the
gradients of kgen.torch.attention with a variant (q, k, v, sinks, learnable tensors) against
float64 autograd through the same reference; and its second-order gradients (the double
backward) against float64 autograd twice. Skipped unless PyTorch with CUDA and libkgen.so are
available."""
import math
from dataclasses import dataclass, field
from typing import Callable

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen  # noqa: E402
import kgen.torch  # noqa: E402
from kgen import _kernels  # noqa: E402
from kgen.testing import REL_L2_BOUND, TOLERANCE, check_attention, compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
SHAPES = [(100, 300), (257, 257), (1000, 1000)]  # (n_q, n_k)
BATCH, HEADS_Q, HEADS_KV = 2, 8, 2
ROW_ERROR_MULTIPLE, ROW_NORM_FLOOR = 20.0, 0.5  # check/metrics.h kRowErrorMultiple, kRowNormFloor
DEVICE = "cuda"


# --- variants: kgen's keywords and the same formulas on index grids ------------------------------------

@dataclass
class Case:
    """One variant for one shape: kgen.torch's keywords, and the score modification and mask as
    functions of the scaled score and the index grids b, h, q, k (broadcastable tensors) with the
    variant's tensors `t` (float64 copies of the float ones for the reference)."""
    keywords: dict
    score: Callable | None = None  # (s, b, h, q, k, t) -> s'
    mask: Callable | None = None  # (b, h, q, k, t) -> bool
    tensors: dict = field(default_factory=dict)
    causal: bool = False
    sinks: torch.Tensor | None = None


def _trunc(x, y):
    return torch.div(x, y, rounding_mode="trunc")  # C's integer division, as the language's /


def _generator(seed):
    return torch.Generator(device=DEVICE).manual_seed(seed)


def _documents(b, n, seed):
    """int32 (b, n): 3 to 8 packed documents per sequence, as contiguous runs."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(b):
        docs = int(torch.randint(3, 9, (1,), generator=g))
        cuts = torch.sort(torch.randperm(n - 1, generator=g)[:docs - 1] + 1).values
        row = torch.zeros(n, dtype=torch.int32)
        for c in cuts:
            row[c:] += 1
        rows.append(row)
    return torch.stack(rows).to(DEVICE)


def _alibi_slopes(h):
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=torch.float32, device=DEVICE)


def make_case(name, n_q, n_k):
    """The Case `name` for (n_q, n_k); query q sits at key position q' = q + n_k - n_q."""
    diag = n_k - n_q
    h = HEADS_Q
    if name == "window_left":
        return Case(dict(window=(64, -1)), mask=lambda b, hh, q, k, t: k >= q + diag - 64)
    if name == "window_both":
        return Case(dict(window=(32, 16)), mask=lambda b, hh, q, k, t: (k >= q + diag - 32) & (k <= q + diag + 16))
    if name == "window_open_left":
        return Case(dict(window=(-1, 8)), mask=lambda b, hh, q, k, t: k <= q + diag + 8)
    if name in ("softcap30", "softcap50"):
        c = float(name[7:])
        return Case(dict(softcap=c), score=lambda s, b, hh, q, k, t: c * torch.tanh(s / c))
    if name == "alibi":
        slopes = _alibi_slopes(h)
        return Case(dict(alibi_slopes=slopes), score=lambda s, b, hh, q, k, t: s - t["slopes"][hh] * (q + diag - k).abs(),
                    tensors={"slopes": slopes})
    if name == "sinks":
        sinks = torch.randn(h, generator=_generator(5), device=DEVICE)
        return Case(dict(sinks=sinks), sinks=sinks)
    if name == "window_softcap_sinks":
        sinks = torch.randn(h, generator=_generator(6), device=DEVICE) + 1.0
        return Case(dict(window=(48, 0), softcap=30.0, sinks=sinks), sinks=sinks,
                    score=lambda s, b, hh, q, k, t: 30.0 * torch.tanh(s / 30.0),
                    mask=lambda b, hh, q, k, t: (k >= q + diag - 48) & (k <= q + diag))
    if name == "prefix_lm":
        return Case(dict(prefix=37), mask=lambda b, hh, q, k, t: (k < 37) | (k <= q + diag))
    if name == "chunked":
        return Case(dict(chunk=64), mask=lambda b, hh, q, k, t: _trunc(q + diag, 64) == _trunc(k, 64))
    if name == "documents":
        doc = _documents(BATCH, n_k, n_q + n_k)
        return Case(dict(document_ids=doc), mask=lambda b, hh, q, k, t: t["doc"][b, q + diag] == t["doc"][b, k],
                    tensors={"doc": doc})
    if name == "causal_top_left":
        return Case(dict(causal_top_left=True), mask=lambda b, hh, q, k, t: k <= q)
    if name == "causal_window":
        return Case(dict(window=(40, -1)), causal=True, mask=lambda b, hh, q, k, t: k >= q + diag - 40)
    if name == "relative_bias":
        bias = 0.5 * torch.randn(h, 8191, generator=_generator(7), device=DEVICE)
        return Case(dict(score_mod="score + bias[h][q - k + 4095]", tensors={"bias": bias}),
                    score=lambda s, b, hh, q, k, t: s + t["bias"][hh, q - k + 4095], tensors={"bias": bias})
    if name == "t5_buckets":
        # T5's log-spaced relative buckets, continuous (the language has no real-to-int rounding)
        w = -0.1 * torch.rand(h, generator=_generator(8), device=DEVICE)
        text = ("score + w[h] * where(abs(q - k) < 8, float(abs(q - k)), "
                "min(15.0, 8.0 + log(float(abs(q - k)) / 8.0) / log(16.0) * 8.0))")

        def t5(s, b, hh, q, k, t):
            d = (q - k).abs().to(s.dtype)
            far = torch.clamp(8.0 + torch.log(d / 8.0) / math.log(16.0) * 8.0, max=15.0)
            return s + t["w"][hh] * torch.where(d < 8, d, far)
        return Case(dict(score_mod=text, tensors={"w": w}), score=t5, tensors={"w": w})
    if name == "tanh_bias":
        b2 = torch.randn(h, generator=_generator(9), device=DEVICE)
        return Case(dict(score_mod="tanh(score / c) * c + b2[h]", scalars={"c": 20.0}, tensors={"b2": b2}),
                    score=lambda s, b, hh, q, k, t: torch.tanh(s / 20.0) * 20.0 + t["b2"][hh], tensors={"b2": b2})
    if name == "tanh_key_bias":  # a bias that varies along the keys: its gradient is not 0
        b2 = 0.25 * torch.randn(h, 8, generator=_generator(10), device=DEVICE)
        return Case(dict(score_mod="tanh(score / c) * c + b2[h][k % 8]", scalars={"c": 20.0}, tensors={"b2": b2}),
                    score=lambda s, b, hh, q, k, t: torch.tanh(s / 20.0) * 20.0 + t["b2"][hh, k % 8],
                    tensors={"b2": b2})
    if name == "bias_sinks_window":
        bias = 0.5 * torch.randn(h, 8191, generator=_generator(11), device=DEVICE)
        sinks = torch.randn(h, generator=_generator(12), device=DEVICE)
        return Case(dict(window=(96, 0), sinks=sinks, score_mod="score + bias[h][q - k + 4095]", tensors={"bias": bias}),
                    score=lambda s, b, hh, q, k, t: s + t["bias"][hh, q - k + 4095],
                    mask=lambda b, hh, q, k, t: (k >= q + diag - 96) & (k <= q + diag), tensors={"bias": bias},
                    sinks=sinks)
    if name == "document_mask_mod":
        doc = _documents(BATCH, n_k, 3 * n_k)
        return Case(dict(mask_mod="doc[b][q] == doc[b][k]", tensors={"doc": doc}),
                    mask=lambda b, hh, q, k, t: t["doc"][b, q] == t["doc"][b, k], tensors={"doc": doc})
    if name == "sigmoid_score":
        return Case(dict(score_mod="sigmoid(score) * score"), score=lambda s, b, hh, q, k, t: torch.sigmoid(s) * s)
    if name == "integer_scalar_mask":
        return Case(dict(mask_mod="k <= q + shift", scalars={"shift": 5}), mask=lambda b, hh, q, k, t: k <= q + 5)
    raise ValueError(name)


CASES = ["window_left", "window_both", "window_open_left", "softcap30", "softcap50", "alibi", "sinks",
         "window_softcap_sinks", "prefix_lm", "chunked", "documents", "causal_top_left", "causal_window",
         "relative_bias", "t5_buckets", "tanh_bias", "document_mask_mod", "sigmoid_score", "integer_scalar_mask"]


# --- the float64 reference ------------------------------------------------------------------------------

def _grids(n_q, n_k):
    arange = lambda n: torch.arange(n, device=DEVICE)  # noqa: E731
    return (arange(BATCH)[:, None, None, None], arange(HEADS_Q)[None, :, None, None], arange(n_q)[None, None, :, None],
            arange(n_k)[None, None, None, :])


def reference(q, k, v, case: Case, scale, leaves=None):
    """(o, lse) in float64 of logical (b, h, n, d) q, k, v: scores scale·q·kᵀ, the modification,
    the masks (causal bottom-right, the variant's), softmax with the sink as one more logit per
    row; a row that sees nothing gets o = 0 and lse = -inf, or lse = its sink with sinks.
    Differentiable (no NaN in any gradient) in q, k, v and in `leaves`, float64 tensors that
    stand for the case's tensors and "sinks" of the same names."""
    n_q, n_k = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    q64 = q.double()
    k64, v64 = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
    leaves = leaves or {}
    t = {name: x.double() if x.is_floating_point() else x for name, x in case.tensors.items()}
    t.update({name: x for name, x in leaves.items() if name != "sinks"})
    sinks = leaves.get("sinks", case.sinks)
    b, h, qi, ki = _grids(n_q, n_k)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if case.score is not None:
        s = case.score(s, b, h, qi, ki, t)
    visible = torch.ones(s.shape, dtype=torch.bool, device=s.device)
    if case.causal:
        visible &= ki <= qi + (n_k - n_q)
    if case.mask is not None:
        visible &= case.mask(b, h, qi, ki, t)
    s = s.masked_fill(~visible, -math.inf)
    if sinks is not None:
        sink = sinks.double()[None, :, None, None].expand(s.shape[0], -1, n_q, 1)
        s = torch.cat([s, sink], dim=-1)
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # a row that sees nothing: p = 0
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p[..., :n_k] @ v64) / torch.where(l == 0, torch.ones_like(l), l)
    return o, (m + torch.log(l)).squeeze(-1)


def row_errors(out, ref):
    """e_r of docs/attention.md §5.2 per row (the last dim): ‖out_r − ref_r‖ / max(‖ref_r‖, 0.5·rms)."""
    out, ref = out.double().reshape(-1, out.shape[-1]), ref.double().reshape(-1, ref.shape[-1])
    norms = torch.linalg.vector_norm(ref, dim=-1)
    rms = float(torch.linalg.vector_norm(ref)) / math.sqrt(ref.shape[0])
    if rms == 0:
        return torch.zeros_like(norms)
    return torch.linalg.vector_norm(out - ref, dim=-1) / torch.clamp(norms, min=ROW_NORM_FLOOR * rms)


def check(o, lse, o_ref, lse_ref, dtype, what):
    """The §5.2 rule: rel_l2, cosine, finiteness, masked rows, the row rule on o and each lse value
    within the dtype's atol + rtol·|ref|."""
    checks = check_attention(o, lse, o_ref, lse_ref, dtype)
    assert all(c.ok for c in checks), f"{what}\n" + "\n".join(map(str, checks))
    errors = row_errors(o, o_ref)
    limit = ROW_ERROR_MULTIPLE * REL_L2_BOUND[dtype]
    worst = int(torch.argmax(errors))
    assert float(errors[worst]) <= limit, (f"{what}: o row {worst} of {errors.numel()}: its error "
                                           f"{float(errors[worst]):.2e} is above {limit:.2e}")
    atol, rtol = TOLERANCE[dtype]
    finite = torch.isfinite(lse_ref)
    diff = (lse.double() - lse_ref)[finite].abs()
    allowed = atol + rtol * lse_ref[finite].abs()
    assert bool((diff <= allowed).all()), f"{what}: lse off by up to {float(diff.max()):.2e}"


# --- kgen against the reference -----------------------------------------------------------------------

def randn(shape, dtype, seed):
    return torch.randn(shape, generator=_generator(seed), device=DEVICE).to(dtype)


def run_kgen(case: Case, dtype, d, n_q, n_k, layout, seed):
    """(logical q, k, v, o, lse) of kgen on NaN-poisoned outputs."""
    def shaped(heads, n):
        return (BATCH, n, heads, d) if layout == "bnhd" else (BATCH, heads, n, d)
    q = randn(shaped(HEADS_Q, n_q), dtype, seed)
    k = randn(shaped(HEADS_KV, n_k), dtype, seed + 1)
    v = randn(shaped(HEADS_KV, n_k), dtype, seed + 2)
    out = torch.full_like(q, math.nan)
    lse = torch.full((BATCH, HEADS_Q, n_q), math.nan, dtype=torch.float32, device=DEVICE)
    o, l = kgen.torch.attention_forward(q, k, v, causal=case.causal, layout=layout, out=out, lse=lse,
                                        return_lse=True, **case.keywords)
    assert o is out and l is lse
    torch.cuda.synchronize()
    logical = (lambda t: t.transpose(1, 2)) if layout == "bnhd" else (lambda t: t)
    return logical(q), logical(k), logical(v), logical(o), l


def head_dims(dtype):
    return [64, 128, 80] + ([72] if dtype == torch.float32 else [])


@pytest.mark.parametrize("n_q,n_k", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", CASES)
def test_variant_forward(name, dtype, n_q, n_k):
    """Every head dim of the dtype, alternating BHND and BNHD, GQA 4 (8 query heads, 2 kv heads)."""
    case = make_case(name, n_q, n_k)
    for i, d in enumerate(head_dims(dtype)):
        layout = ("bhnd", "bnhd")[(i + CASES.index(name) + SHAPES.index((n_q, n_k))) % 2]
        q, k, v, o, lse = run_kgen(case, dtype, d, n_q, n_k, layout, seed=17 * i + n_q)
        o_ref, lse_ref = reference(q, k, v, case, d ** -0.5)
        check(o, lse, o_ref, lse_ref, dtype, f"{name} {dtype} d={d} {layout} {n_q}x{n_k}")


def test_masked_rows():
    """Rows that see no key: o = 0 and lse = -inf, or lse = the sink's logit with sinks."""
    n_q, n_k = 64, 64
    for sinks in (None, torch.randn(HEADS_Q, generator=_generator(3), device=DEVICE)):
        keywords = dict(mask_mod="q >= 10")
        if sinks is not None:
            keywords["sinks"] = sinks
        case = Case(keywords, mask=lambda b, h, q, k, t: (q >= 10) & (k >= 0), sinks=sinks)
        q, k, v, o, lse = run_kgen(case, torch.bfloat16, 64, n_q, n_k, "bhnd", seed=1)
        assert bool((o[:, :, :10] == 0).all())
        expected = torch.full_like(lse[:, :, :10], -math.inf) if sinks is None else \
            sinks[None, :, None].expand(BATCH, -1, 10)
        assert torch.equal(lse[:, :, :10], expected)
        o_ref, lse_ref = reference(q, k, v, case, 64 ** -0.5)
        check(o, lse, o_ref, lse_ref, torch.bfloat16, f"masked rows, sinks {sinks is not None}")


def test_causal_top_left_is_sdpa_is_causal():
    q, k, v = (randn((1, 4, n, 64), torch.bfloat16, s) for n, s in ((100, 1), (300, 2), (300, 3)))
    o = kgen.torch.attention_forward(q, k, v, causal_top_left=True)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        sdpa = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert float((o.double() - sdpa).abs().max()) < 2e-2


def test_scalar_values_and_tensor_contents_are_run_time_inputs():
    """Two calls of one variant with other scalar values and tensor contents: each is right (the
    kernel is reused, its inputs are not baked in)."""
    for c, seed in ((10.0, 1), (40.0, 2)):
        b2 = torch.randn(HEADS_Q, generator=_generator(seed), device=DEVICE)
        case = Case(dict(score_mod="tanh(score / c) * c + b2[h]", scalars={"c": c}, tensors={"b2": b2}),
                    score=lambda s, b, h, q, k, t, c=c: torch.tanh(s / c) * c + t["b2"][h], tensors={"b2": b2})
        q, k, v, o, lse = run_kgen(case, torch.float16, 64, 257, 257, "bhnd", seed=seed)
        o_ref, lse_ref = reference(q, k, v, case, 64 ** -0.5)
        check(o, lse, o_ref, lse_ref, torch.float16, f"tanh_bias c={c}")


def test_compiled_equals_eager():
    q, k, v = (randn((2, 8 if i == 0 else 2, 257, 64), torch.bfloat16, i) for i in range(3))
    slopes = _alibi_slopes(8)

    def f(q, k, v):
        return kgen.torch.attention(q, k, v, causal=True, window=(64, 0), alibi_slopes=slopes, softcap=30.0)

    with torch.no_grad():
        torch._dynamo.reset()
        compiled = torch.compile(f, fullgraph=True)(q, k, v)
        assert torch.equal(compiled, f(q, k, v))


# --- against FlexAttention ----------------------------------------------------------------------------

FLEX_FLOOR = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 4e-3}
_flex = {}


def flex_attention():
    """(flex_attention, create_block_mask), compiled where torch.compile works here, or None."""
    if "fn" not in _flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention as flex
        except ImportError:
            _flex["fn"] = None
            return None
        try:
            compiled = torch.compile(flex, dynamic=False)
        except Exception:  # noqa: BLE001 - no compiler here: the eager FlexAttention
            compiled = flex
        _flex["fn"] = (compiled, flex, create_block_mask)
    return _flex["fn"]


@pytest.mark.parametrize("n_q,n_k", SHAPES[:2], ids=[f"{a}x{b}" for a, b in SHAPES[:2]])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", [c for c in CASES if "sinks" not in c])  # FlexAttention has no sinks
def test_variant_error_against_flex_attention(name, dtype, n_q, n_k):
    """kgen's max-abs error on o against the float64 reference is at most 1.5× FlexAttention's for
    the same inputs and variant (plus a small absolute floor)."""
    functions = flex_attention()
    if functions is None:
        pytest.skip("torch.nn.attention.flex_attention is not available")
    compiled, eager, create_block_mask = functions
    torch._dynamo.reset()  # each case's closures as constants, not as dynamic values of one traced code
    case = make_case(name, n_q, n_k)
    d = 64
    q, k, v, o, lse = run_kgen(case, dtype, d, n_q, n_k, "bhnd", seed=n_q + 5)
    o_ref, _ = reference(q, k, v, case, d ** -0.5)
    t = case.tensors
    diag = n_k - n_q

    def score_mod(score, b, h, q_idx, kv_idx):
        return case.score(score, b, h, q_idx, kv_idx, t)

    def mask_mod(b, h, q_idx, kv_idx):
        visible = kv_idx <= q_idx + diag if case.causal else kv_idx >= 0
        return visible & case.mask(b, h, q_idx, kv_idx, t) if case.mask is not None else visible

    block_mask = None
    if case.mask is not None or case.causal:
        block_mask = create_block_mask(mask_mod, BATCH, HEADS_Q, n_q, n_k, device=DEVICE)
    kwargs = dict(score_mod=score_mod if case.score is not None else None, block_mask=block_mask,
                  scale=d ** -0.5, enable_gqa=True)
    try:
        if dtype == torch.float32:  # fp32: eager (inductor's fp32 FlexAttention kernels did not compile in 270 s)
            raise NotImplementedError
        o_flex = compiled(q, k, v, **kwargs)
    except Exception:  # noqa: BLE001 - this shape or dtype is not compiled here: eager FlexAttention
        try:
            o_flex = eager(q, k, v, **kwargs)
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"FlexAttention does not run this case: {type(e).__name__}: {e}")
    torch.cuda.synchronize()
    kgen_error = float((o.double() - o_ref).abs().max())
    flex_error = float((o_flex.double() - o_ref).abs().max())
    assert kgen_error <= 1.5 * flex_error + FLEX_FLOOR[dtype], \
        f"{name} {dtype}: kgen's max-abs error {kgen_error:.2e}, FlexAttention's {flex_error:.2e}"


# --- gradients: kgen.torch.attention's backward against float64 autograd ------------------------------

# rel_l2 bounds of the sinks' and learnable tensors' gradients: each element sums dS over many
# (b, q, k), accumulated in fp32 in any order, so an fp32 run gets 1e-4 rather than dq's 1e-5.
SUM_BOUND = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}

# (case, dtype, (n_q, n_k), d, layout, names that learn: "sinks" and the case's fp32 tensors)
GRADIENT_CASES = [
    ("window_left", torch.float16, (257, 257), 64, "bhnd", ()),
    ("window_both", torch.bfloat16, (100, 300), 128, "bnhd", ()),
    ("softcap30", torch.bfloat16, (257, 257), 64, "bnhd", ()),
    ("softcap50", torch.float32, (100, 300), 64, "bhnd", ()),
    ("alibi", torch.float16, (100, 300), 128, "bhnd", ()),
    ("sinks", torch.bfloat16, (257, 257), 64, "bnhd", ("sinks",)),
    ("sinks", torch.float32, (100, 300), 80, "bhnd", ("sinks",)),
    ("window_softcap_sinks", torch.bfloat16, (1000, 1000), 128, "bhnd", ("sinks",)),
    ("window_softcap_sinks", torch.float16, (257, 257), 64, "bnhd", ("sinks",)),
    ("documents", torch.bfloat16, (100, 300), 64, "bnhd", ()),
    ("prefix_lm", torch.float16, (257, 257), 128, "bhnd", ()),
    ("chunked", torch.bfloat16, (1000, 1000), 64, "bnhd", ()),
    ("causal_top_left", torch.float16, (100, 300), 64, "bhnd", ()),
    ("causal_window", torch.bfloat16, (257, 257), 64, "bhnd", ()),
    ("relative_bias", torch.bfloat16, (257, 257), 64, "bnhd", ("bias",)),
    ("relative_bias", torch.float32, (100, 300), 64, "bhnd", ("bias",)),
    ("t5_buckets", torch.float16, (100, 300), 64, "bnhd", ("w",)),
    ("tanh_key_bias", torch.bfloat16, (257, 257), 128, "bhnd", ("b2",)),
    ("tanh_key_bias", torch.float16, (1000, 1000), 64, "bnhd", ("b2",)),
    ("bias_sinks_window", torch.bfloat16, (257, 257), 64, "bhnd", ("sinks", "bias")),
    ("bias_sinks_window", torch.float32, (100, 300), 72, "bnhd", ("sinks", "bias")),
    ("document_mask_mod", torch.bfloat16, (257, 257), 64, "bhnd", ()),
    ("sigmoid_score", torch.float32, (257, 257), 64, "bnhd", ()),
    ("integer_scalar_mask", torch.float16, (257, 257), 64, "bhnd", ()),
]


def _gradient_id(c):
    name, dtype, (n_q, n_k), d, layout, learn = c
    return f"{name}-{str(dtype)[6:]}-{n_q}x{n_k}-d{d}-{layout}" + "".join(f"-{x}" for x in learn)


def check_gradient(name, got, ref, bound, rows: bool, what):
    """rel_l2 within `bound`, cosine, finiteness; with `rows`, the row rule over the last dim."""
    c = compare(name, got, ref, bound=bound)
    assert c.ok, f"{what}: {c}"
    if rows:
        errors = row_errors(got, ref)
        worst = int(torch.argmax(errors))
        assert float(errors[worst]) <= ROW_ERROR_MULTIPLE * bound, (
            f"{what}: {name} row {worst} of {errors.numel()}: its error {float(errors[worst]):.2e} is above "
            f"{ROW_ERROR_MULTIPLE * bound:.2e}")


def _learning(case: Case, learn) -> tuple[dict, dict]:
    """(kgen's keywords with fp32 leaves requiring grad in place of the learning tensors, those
    leaves by name)."""
    keywords = dict(case.keywords)
    leaves = {}
    for name in learn:
        source = case.sinks if name == "sinks" else case.tensors[name]
        leaves[name] = source.detach().clone().requires_grad_()
        if name == "sinks":
            keywords["sinks"] = leaves[name]
        else:
            keywords["tensors"] = {**keywords["tensors"], name: leaves[name]}
    return keywords, leaves


def reference_gradients(q, k, v, r, case: Case, scale, leaves: dict):
    """Float64 autograd of Σ r∘o through `reference` for logical q, k, v, r: (dq, dk, dv) and the
    gradient of each leaf by name."""
    inputs = [t.detach().double().requires_grad_() for t in (q, k, v)]
    leaves64 = {name: x.detach().double().requires_grad_() for name, x in leaves.items()}
    o, _ = reference(*inputs, case, scale, leaves64)
    grads = torch.autograd.grad((o * r.double()).sum(), [*inputs, *leaves64.values()])
    return grads[:3], dict(zip(leaves64, grads[3:]))


def logical(t, layout):
    return t.transpose(1, 2) if layout == "bnhd" else t


def gradient_problem(dtype, n_q, n_k, d, layout, seed):
    """q, k, v (requiring grad; GQA 4) and an output gradient r of `layout`, from `seed` on."""
    def shaped(heads, n):
        return (BATCH, n, heads, d) if layout == "bnhd" else (BATCH, heads, n, d)
    q = randn(shaped(HEADS_Q, n_q), dtype, seed).requires_grad_()
    k = randn(shaped(HEADS_KV, n_k), dtype, seed + 1).requires_grad_()
    v = randn(shaped(HEADS_KV, n_k), dtype, seed + 2).requires_grad_()
    return q, k, v, randn(shaped(HEADS_Q, n_q), dtype, seed + 3)


@pytest.mark.parametrize("c", GRADIENT_CASES, ids=_gradient_id)
def test_variant_gradients(c):
    """dq, dk, dv (GQA 4: dk and dv sum over the query heads of each kv group) and the gradients
    of the sinks and learnable tensors, against float64 autograd through the reference; alibi
    slopes and tensors that do not learn get no gradient."""
    name, dtype, (n_q, n_k), d, layout, learn = c
    case = make_case(name, n_q, n_k)
    q, k, v, r = gradient_problem(dtype, n_q, n_k, d, layout, 31 * n_q + d)  # r: dO, exact in dtype
    keywords, leaves = _learning(case, learn)
    constants = []  # alibi slopes requiring grad: constants of the preset all the same
    if "alibi_slopes" in keywords:
        keywords["alibi_slopes"] = keywords["alibi_slopes"].clone().requires_grad_()
        constants.append(keywords["alibi_slopes"])
    o = kgen.torch.attention(q, k, v, causal=case.causal, layout=layout,
                             deterministic=name == "window_softcap_sinks" and dtype == torch.float16, **keywords)
    got = torch.autograd.grad((o.float() * r.float()).sum(), [q, k, v, *leaves.values(), *constants],
                              allow_unused=True)
    torch.cuda.synchronize()
    assert all(g is None for g in got[3 + len(leaves):]), "alibi slopes get no gradient"
    ref, ref_leaves = reference_gradients(*(logical(t, layout) for t in (q, k, v, r)), case, d ** -0.5, leaves)
    what = _gradient_id(c)
    for grad_name, a, e in zip(("dq", "dk", "dv"), got[:3], ref):
        assert logical(a, layout).shape == e.shape
        check_gradient(grad_name, logical(a, layout), e, REL_L2_BOUND[dtype], True, what)
    for (leaf, a), e in zip(zip(leaves, got[3:]), ref_leaves.values()):
        assert a.dtype == torch.float32 and a.shape == leaves[leaf].shape
        check_gradient(f"d{leaf}", a, e, SUM_BOUND[dtype], False, what)


def test_variant_backward_overwrites_poisoned_buffers():
    """The variant backward's kernel on NaN-poisoned dq, dk, dv, sinks_grad and bias gradient
    (kgen zeroes the variant's gradients before it accumulates into them)."""
    n_q = n_k = 257
    d, dtype, layout = 64, torch.bfloat16, "bnhd"
    case = make_case("bias_sinks_window", n_q, n_k)
    q = randn((BATCH, n_q, HEADS_Q, d), dtype, 1)
    k, v = (randn((BATCH, n_k, HEADS_KV, d), dtype, seed) for seed in (2, 3))
    r = randn(q.shape, dtype, 4)
    o, lse = kgen.torch.attention_forward(q, k, v, layout=layout, return_lse=True, **case.keywords)
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    sinks_grad = torch.full((HEADS_Q,), math.nan, device=DEVICE)
    bias_grad = torch.full_like(case.tensors["bias"], math.nan)
    variant = kgen.torch._variant_of("attention", case.keywords)
    _kernels.variant_backward_out(q, k, v, o, lse, r, dq, dk, dv, sinks_grad, [bias_grad], None, False, layout, False,
                                  None, variant)
    torch.cuda.synchronize()
    leaves = {"sinks": case.sinks, "bias": case.tensors["bias"]}
    ref, ref_leaves = reference_gradients(*(logical(t, layout) for t in (q, k, v, r)), case, d ** -0.5, leaves)
    for grad_name, a, e in zip(("dq", "dk", "dv"), (dq, dk, dv), ref):
        check_gradient(grad_name, logical(a, layout), e, REL_L2_BOUND[dtype], True, "poisoned")
    check_gradient("dsinks", sinks_grad, ref_leaves["sinks"], SUM_BOUND[dtype], False, "poisoned")
    check_gradient("dbias", bias_grad, ref_leaves["bias"], SUM_BOUND[dtype], False, "poisoned")
    assert bool((bias_grad[:, :4095 - n_k] == 0).all()), "entries no score reads must be 0"


def test_variant_gradients_under_autocast():
    """fp32 leaves under torch.autocast("cuda", bfloat16): the variant runs in bf16 and the
    gradients come back in fp32 through the casts."""
    case = make_case("window_softcap_sinks", 257, 257)
    q = randn((BATCH, HEADS_Q, 257, 64), torch.float32, 5).requires_grad_()
    k, v = (randn((BATCH, HEADS_KV, 257, 64), torch.float32, seed).requires_grad_() for seed in (6, 7))
    r = randn(q.shape, torch.bfloat16, 8)
    keywords, leaves = _learning(case, ("sinks",))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        o = kgen.torch.attention(q, k, v, **keywords)
    assert o.dtype == torch.bfloat16
    got = torch.autograd.grad((o.float() * r.float()).sum(), [q, k, v, leaves["sinks"]])
    assert [g.dtype for g in got] == [torch.float32] * 4
    ref, ref_leaves = reference_gradients(q.bfloat16(), k.bfloat16(), v.bfloat16(), r, case, 64 ** -0.5, leaves)
    for grad_name, a, e in zip(("dq", "dk", "dv"), got[:3], ref):
        check_gradient(grad_name, a, e, REL_L2_BOUND[torch.bfloat16], True, "autocast")
    check_gradient("dsinks", got[3], ref_leaves["sinks"], SUM_BOUND[torch.bfloat16], False, "autocast")


def test_compiled_variant_gradients_equal_eager():
    """torch.compile(fullgraph=True) of the forward and backward gives eager's gradients."""
    case = make_case("bias_sinks_window", 257, 257)
    keywords, leaves = _learning(case, ("sinks", "bias"))
    q = randn((BATCH, HEADS_Q, 257, 64), torch.bfloat16, 9).requires_grad_()
    k, v = (randn((BATCH, HEADS_KV, 257, 64), torch.bfloat16, seed).requires_grad_() for seed in (10, 11))
    inputs = [q, k, v, *leaves.values()]

    def f(q, k, v):
        return kgen.torch.attention(q, k, v, causal=True, deterministic=True, **keywords).float().square().sum()

    torch._dynamo.reset()
    compiled = torch.autograd.grad(torch.compile(f, fullgraph=True)(q, k, v), inputs)
    eager = torch.autograd.grad(f(q, k, v), inputs)
    for grad_name, a, e in zip(("dq", "dk", "dv", "dsinks", "dbias"), compiled, eager):
        check_gradient(grad_name, a, e, 1e-5, False, "compiled against eager")


# --- the double backward: second-order gradients against float64 autograd ------------------------------

# rel_l2 bounds of the second-order gradients (docs/attention.md §5.2, as test_autograd_gpu.py's).
SECOND_BOUND = {torch.float16: 2e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}

# (case, dtype, (n_q, n_k), d, layout): the fa2 kernels for 16-bit (sm_90a too: the wgmma double
# backward has no variants), the general path for fp32; sinks and tensors are constants.
DOUBLE_CASES = [
    ("window_left", torch.float16, (257, 257), 64, "bhnd"),
    ("window_both", torch.bfloat16, (100, 300), 128, "bnhd"),
    ("softcap30", torch.bfloat16, (257, 257), 64, "bnhd"),
    ("softcap50", torch.float16, (100, 300), 128, "bhnd"),
    ("alibi", torch.bfloat16, (100, 300), 80, "bnhd"),
    ("window_softcap_sinks", torch.bfloat16, (1000, 1000), 128, "bhnd"),
    ("documents", torch.bfloat16, (257, 257), 64, "bnhd"),
    ("prefix_lm", torch.float16, (257, 257), 256, "bhnd"),
    ("chunked", torch.bfloat16, (1000, 1000), 64, "bnhd"),
    ("causal_top_left", torch.float16, (100, 300), 64, "bhnd"),
    ("relative_bias", torch.bfloat16, (257, 257), 64, "bnhd"),
    ("t5_buckets", torch.float16, (100, 300), 64, "bhnd"),
    ("tanh_key_bias", torch.bfloat16, (257, 257), 128, "bhnd"),
    ("sigmoid_score", torch.float16, (257, 257), 64, "bnhd"),
    ("document_mask_mod", torch.bfloat16, (100, 300), 64, "bhnd"),
    ("softcap30", torch.float32, (100, 300), 72, "bnhd"),
    ("window_softcap_sinks", torch.float32, (257, 257), 64, "bhnd"),
]


def _double_id(c):
    name, dtype, (n_q, n_k), d, layout = c
    return f"{name}-{str(dtype)[6:]}-{n_q}x{n_k}-d{d}-{layout}"


@pytest.mark.parametrize("c", DOUBLE_CASES, ids=_double_id)
def test_variant_double_backward(c):
    """q̄, k̄, v̄ and dŌ of an outer loss Σ⟨gq, dq⟩ + ⟨gk, dk⟩ + ⟨gv, dv⟩ (create_graph=True, then a
    second grad; GQA 4) against float64 autograd twice through the reference: the modification's
    first and second derivatives and the mask in every term."""
    name, dtype, (n_q, n_k), d, layout = c
    case = make_case(name, n_q, n_k)
    seed = 17 * n_q + d
    q, k, v, r = gradient_problem(dtype, n_q, n_k, d, layout, seed)
    r.requires_grad_()  # dO, a leaf of its own
    cotangents = [randn(t.shape, dtype, seed + 4 + i) for i, t in enumerate((q, k, v))]
    o = kgen.torch.attention(q, k, v, causal=case.causal, layout=layout, **case.keywords)
    first = torch.autograd.grad(o, (q, k, v), r, create_graph=True)
    got = torch.autograd.grad(first, (q, k, v, r), cotangents)
    torch.cuda.synchronize()
    check_double_backward(got, case, (q, k, v, r), cotangents, c)


def check_double_backward(got, case, inputs, cotangents, c):
    """q̄, k̄, v̄, dŌ of case `c` against float64 autograd twice through the reference."""
    name, dtype, (n_q, n_k), d, layout = c
    leaves = [logical(t, layout).detach().double().requires_grad_() for t in inputs]
    o64, _ = reference(*leaves[:3], case, d ** -0.5)
    first64 = torch.autograd.grad(o64, leaves[:3], leaves[3], create_graph=True)
    ref = torch.autograd.grad(first64, leaves, [logical(t, layout).double() for t in cotangents])
    what = _double_id(c)
    for grad_name, a, e in zip(("q_bar", "k_bar", "v_bar", "do_bar"), got, ref):
        assert logical(a, layout).shape == e.shape
        check_gradient(grad_name, logical(a, layout), e, SECOND_BOUND[dtype], True, what)


# The fa2 double backward under an explicit config (on sm_90a the default is wg:): query tiles
# that run past n_q (100, 257 and 1000 rows) with a score modification, which the key-major kernel
# must mask there; the first config the head dim admits runs.
FA2_DOUBLE_CASES = [c for c in DOUBLE_CASES if c[0] in ("softcap50", "softcap30", "window_softcap_sinks")
                    and c[1] != torch.float32]
FA2_DOUBLE_CONFIGS = ("fa2:bm64:bn32:w4", "fa2:bm64:bn16:w4", "fa2:bm32:bn16:w2")


@pytest.mark.parametrize("c", FA2_DOUBLE_CASES, ids=_double_id)
def test_variant_double_backward_on_fa2(c):
    """The operator attention_double_backward_variant with an fa2 config against float64."""
    from kgen._lib import KgenError
    name, dtype, (n_q, n_k), d, layout = c
    case = make_case(name, n_q, n_k)
    seed = 17 * n_q + d
    q, k, v, r = (t.detach() for t in gradient_problem(dtype, n_q, n_k, d, layout, seed))
    cotangents = [randn(t.shape, dtype, seed + 4 + i) for i, t in enumerate((q, k, v))]
    variant = kgen.torch._variant(**case.keywords)
    scale = d ** -0.5
    o, lse = kgen.torch._variant_forward(q, k, v, case.causal, scale, layout, variant, None, None, True)
    for config in FA2_DOUBLE_CONFIGS:
        try:
            got = kgen.torch._run(kgen.torch._DOUBLE_BACKWARD_VARIANT, q, k, v, o, lse, r, *cotangents, scale,
                                  case.causal, layout, False, config, *variant)
            break
        except KgenError as e:
            if "invalid here" not in str(e):
                raise
    else:
        pytest.fail(f"none of {FA2_DOUBLE_CONFIGS} serves d = {d}")
    torch.cuda.synchronize()
    check_double_backward(got, case, (q, k, v, r), cotangents, c)


def test_double_backward_of_a_variant_refuses_learning_sinks():
    """The double backward treats sinks and tensors as constants: where a second grad needs their
    gradient it says so."""
    case = make_case("sinks", 64, 64)
    q = randn((1, HEADS_Q, 64, 64), torch.float16, 12).requires_grad_()
    k = randn((1, HEADS_KV, 64, 64), torch.float16, 13).requires_grad_()
    sinks = case.sinks.clone().requires_grad_()
    o = kgen.torch.attention(q, k, k, sinks=sinks)
    dq, = torch.autograd.grad(o.float().sum(), q, create_graph=True)
    assert torch.isfinite(dq).all()
    with pytest.raises(NotImplementedError, match="^kgen.torch.attention: the double backward of a variant gives no "
                                                  "gradient to the sinks"):
        torch.autograd.grad(dq.float().square().sum(), (q, k))
