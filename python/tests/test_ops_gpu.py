"""GPU tests of torch.ops.kgen.* and what rests on them: torch.library.opcheck of every operator,
the direct kernels against the operators, fake errors against eager errors, autocast (eager and
compiled), torch.compile(fullgraph=True) against eager, CUDA graph capture and calls from several
threads. Skipped unless PyTorch with CUDA and libkgen.so are available."""
import threading

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen  # noqa: E402
import kgen.torch  # noqa: E402
from kgen import _kernels  # noqa: E402
from kgen.testing import AttentionBlock, attention_math, compare, lrpe_reference  # noqa: E402
from test_paged_append_gpu import _table as page_table, _tables as rotary_tables  # noqa: E402
from test_varlen_gpu import _cu as cu_seqlens  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")
ops = torch.ops.kgen


def randn(shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).cuda()


def theta(rows, cols, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = 10000.0 ** (-torch.arange(cols, dtype=torch.float64) / cols)
    return (base * (0.5 + 0.5 * torch.rand(rows, cols, generator=g, dtype=torch.float64))).float().cuda()


def shaped(b, h, n, d, layout):
    return (b, n, h, d) if layout == "bnhd" else (b, h, n, d)


def attention_args(layout, dtype=torch.bfloat16):
    q = randn(shaped(2, 4, 70, 64, layout), dtype, 1)
    k = randn(shaped(2, 2, 90, 64, layout), dtype, 2)
    v = randn(shaped(2, 2, 90, 64, layout), dtype, 3)
    return q, k, v


def variant(**keywords):
    """The operators' trailing variant arguments of kgen.torch's variant keywords, as kgen.torch passes them."""
    return tuple(kgen.torch._variant_of("attention", keywords))


# --- opcheck -----------------------------------------------------------------------------------

def opcheck_cases():
    cases = []
    for layout in ("bhnd", "bnhd"):
        q, k, v = attention_args(layout)
        o, lse = ops.attention_forward(q, k, v, None, True, layout)
        d_o = randn(q.shape, seed=4)
        g = (randn(q.shape, seed=5), randn(k.shape, seed=6), randn(k.shape, seed=7))
        grad = (None, True, layout, True, None)  # scale, causal, layout, deterministic, config
        cases += [
            (f"attention_forward-{layout}", ops.attention_forward, (q, k, v, 0.2, True, layout)),
            (f"attention_forward_out-{layout}", ops.attention_forward_out,
             (q, k, v, torch.empty_like(q), torch.empty_like(lse), None, True, layout)),
            (f"attention_forward_out-no-lse-{layout}", ops.attention_forward_out,
             (q, k, v, torch.empty_like(q), None, None, False, layout)),
            (f"attention_backward-{layout}", ops.attention_backward, (q, k, v, o, lse, d_o, *grad)),
            (f"attention_backward_out-{layout}", ops.attention_backward_out,
             (q, k, v, o, lse, d_o, torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), *grad)),
            (f"attention_double_backward-{layout}", ops.attention_double_backward, (q, k, v, o, lse, d_o, *g, *grad)),
            (f"attention_double_backward-gk-only-{layout}", ops.attention_double_backward,
             (q, k, v, o, lse, d_o, None, g[1], None, *grad)),
        ]
        x = randn(shaped(2, 3, 40, 32, layout), torch.float16, 8)
        th, th_md = theta(3, 32), theta(3, 16)
        do_x = randn((*x.shape[:-1], 64), torch.float16, 9)
        angles = ops.md_lrpe_cosine_forward_cached(x, th_md, [5, 8], 0, "silu", layout, None)[1]
        cases += [
            (f"lrpe_cosine_forward-{act}-{layout}", ops.lrpe_cosine_forward, (x, th, 7, act, layout, None))
            for act in ("silu", "softmax_seq")
        ] + [
            (f"lrpe_cosine_backward-{layout}", ops.lrpe_cosine_backward, (x, th, do_x, 7, "softmax_seq", layout, None)),
            (f"md_lrpe_cosine_forward-{layout}", ops.md_lrpe_cosine_forward, (x, th_md, [4, 9], 4, "relu", layout, None)),
            (f"md_lrpe_cosine_forward_cached-{layout}", ops.md_lrpe_cosine_forward_cached,
             (x, th_md, [5, 8], 0, "silu", layout, None)),
            (f"md_lrpe_cosine_backward-{layout}", ops.md_lrpe_cosine_backward,
             (x, th_md, do_x, None, [4, 9], 4, "relu", layout, None)),
            (f"md_lrpe_cosine_backward-cached-{layout}", ops.md_lrpe_cosine_backward,
             (x, th_md, do_x, angles, [5, 8], 0, "silu", layout, None)),
        ]
        cases += mla_cases(layout) + variant_cases(layout) + paged_cases(layout) + paged_append_cases(layout)
    return cases + varlen_cases()


def mla_cases(layout):
    """v with a head dim of its own (d_v 32 < d_qk 64): o, d_o and dv have 32 columns."""
    q, k, _ = attention_args(layout)
    v = randn(shaped(2, 2, 90, 32, layout), seed=10)
    o, lse = ops.attention_forward(q, k, v, None, True, layout)
    d_o = randn(o.shape, seed=11)
    grad = (None, True, layout, True, None)
    return [
        (f"attention_forward-mla-{layout}", ops.attention_forward, (q, k, v, None, True, layout)),
        (f"attention_forward_out-mla-{layout}", ops.attention_forward_out,
         (q, k, v, torch.empty_like(o), torch.empty_like(lse), None, False, layout)),
        (f"attention_backward-mla-{layout}", ops.attention_backward, (q, k, v, o, lse, d_o, *grad)),
        (f"attention_backward_out-mla-{layout}", ops.attention_backward_out,
         (q, k, v, o, lse, d_o, torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), *grad)),
    ]


def variant_cases(layout):
    """The variant operators: window + softcap + sinks (causal), alibi + document ids, and an
    expression with scalars and tensors; the backward with sinks and with a learnable tensor."""
    q, k, v = attention_args(layout)
    g = torch.Generator().manual_seed(12)
    sinks = torch.randn(4, generator=g).cuda()
    slopes = torch.tensor([2.0 ** (-2.0 * (i + 1)) for i in range(4)]).cuda()
    docs = (torch.arange(90) * 3 // 90).to(torch.int32).repeat(2, 1).cuda()  # (b, n_k): 3 documents
    bias = (0.25 * torch.randn(4, 8, generator=g)).cuda()
    fixed = torch.randn(4, generator=g).cuda()
    window = variant(window=(32, 0), softcap=30.0, sinks=sinks)
    alibi = variant(alibi_slopes=slopes, document_ids=docs)
    expression = variant(score_mod="tanh(score / c) * c + bias[h][k % 8]", mask_mod="k <= q + shift",
                         scalars={"c": 20.0, "shift": 5}, tensors={"bias": bias})
    learning = variant(score_mod="score + bias[h][k % 8] + fixed[h]", tensors={"bias": bias, "fixed": fixed})
    cases = [
        (f"attention_forward_variant-window-softcap-sinks-{layout}", ops.attention_forward_variant,
         (q, k, v, None, True, layout, *window)),
        (f"attention_forward_variant-alibi-documents-{layout}", ops.attention_forward_variant,
         (q, k, v, 0.2, False, layout, *alibi)),
        (f"attention_forward_variant-expression-{layout}", ops.attention_forward_variant,
         (q, k, v, None, False, layout, *expression)),
        (f"attention_forward_variant_out-window-softcap-sinks-{layout}", ops.attention_forward_variant_out,
         (q, k, v, torch.empty_like(q), torch.empty((2, 4, 70), device="cuda"), None, True, layout, *window)),
        (f"attention_forward_variant_out-alibi-documents-no-lse-{layout}", ops.attention_forward_variant_out,
         (q, k, v, torch.empty_like(q), None, None, False, layout, *alibi)),
    ]
    for name, causal, learnable, args in (("window-softcap-sinks", True, None, window),
                                          ("learnable", False, [True, False], learning)):
        o, lse = ops.attention_forward_variant(q, k, v, None, causal, layout, *args)
        d_o = randn(q.shape, seed=13)
        cases.append((f"attention_backward_variant-{name}-{layout}", ops.attention_backward_variant,
                      (q, k, v, o, lse, d_o, None, causal, layout, True, None, learnable, *args)))
    o, lse = ops.attention_forward_variant(q, k, v, None, True, layout, *window)
    d_o = randn(q.shape, seed=13)
    g = (randn(q.shape, seed=5), randn(k.shape, seed=6), randn(k.shape, seed=7))
    cases.append((f"attention_double_backward_variant-window-softcap-sinks-{layout}",
                  ops.attention_double_backward_variant,
                  (q, k, v, o, lse, d_o, *g, None, True, layout, True, None, *window)))
    return cases


def varlen_cases():
    """Packed batches of 3 sequences, the middle one empty (no queries, no keys)."""
    lengths_q, lengths_k = [20, 0, 37], [45, 0, 37]
    q = randn((sum(lengths_q), 4, 64), seed=14)
    k, v = randn((sum(lengths_k), 2, 64), seed=15), randn((sum(lengths_k), 2, 64), seed=16)
    cu_q, cu_k = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    packed = (cu_q, cu_k, max(lengths_q), max(lengths_k))
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(17)).cuda()
    cases = []
    for name, scale, args in (("causal", None, ()), ("window-softcap-sinks", 0.2,
                                                      variant(window=(16, 0), softcap=30.0, sinks=sinks))):
        o, lse = ops.varlen_attention_forward(q, k, v, *packed, scale, True, *args)
        d_o = randn(q.shape, seed=18)
        cases += [
            (f"varlen_attention_forward-{name}", ops.varlen_attention_forward, (q, k, v, *packed, scale, True, *args)),
            (f"varlen_attention_backward-{name}", ops.varlen_attention_backward,
             (q, k, v, o, lse, d_o, *packed, scale, True, True, None, *args)),
            (f"varlen_attention_double_backward-{name}", ops.varlen_attention_double_backward,
             (q, k, v, o, lse, d_o, randn(q.shape, seed=19), randn(k.shape, seed=20), randn(v.shape, seed=21),
              *packed, scale, True, True, None, *args)),
        ]
    return cases


def paged_cases(layout):
    """Paged K/V (page_size 16) in shuffled pages: chunked prefill (n_q 4, causal) with
    cache_seqlens, alone and with window + softcap + sinks, and decode over a full table without."""
    table, num_pages = page_table([5, 40, 17], 0, 16, seed=19)  # (3, 4), 8 pages
    lens = torch.tensor([5, 40, 17], dtype=torch.int32).cuda()
    k_cache, v_cache = (randn((num_pages, 16, 2, 64), seed=s) for s in (20, 21))
    q = randn(shaped(3, 4, 4, 64, layout), seed=22)
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(23)).cuda()
    full = torch.arange(8, dtype=torch.int32).reshape(2, 4).cuda()  # every page of the 8
    decode = randn(shaped(2, 4, 1, 64, layout), seed=24)
    return [
        (f"paged_attention_forward-causal-{layout}", ops.paged_attention_forward,
         (q, k_cache, v_cache, table, lens, None, True, layout)),
        (f"paged_attention_forward-window-softcap-sinks-{layout}", ops.paged_attention_forward,
         (q, k_cache, v_cache, table, lens, 0.2, True, layout, *variant(window=(8, 0), softcap=30.0, sinks=sinks))),
        (f"paged_attention_forward-no-seqlens-{layout}", ops.paged_attention_forward,
         (decode, k_cache, v_cache, full, None, None, False, layout)),
    ]


def paged_append_cases(layout):
    """3 new rows per batch into pages of 16 (crossing a page boundary; an empty batch), plain,
    with GPT-NeoX rotary and q into q_out, with GPT-J rotary (fp32 tables) and q in place, and into
    contiguous caches (no block table)."""
    table, num_pages = page_table([5, 0, 30], 3, 16, seed=25)  # (3, 4), 7 pages
    lens = torch.tensor([5, 0, 30], dtype=torch.int32).cuda()
    k, v = randn(shaped(3, 2, 3, 64, layout), seed=26), randn(shaped(3, 2, 3, 64, layout), seed=27)
    q = randn(shaped(3, 4, 3, 64, layout), seed=28)
    k_cache, v_cache = (randn((num_pages, 16, 2, 64), seed=s) for s in (29, 30))
    contiguous = (randn((3, 48, 2, 64), seed=31), randn((3, 48, 2, 64), seed=32))
    neox = rotary_tables(table.shape[1] * 16, 64, torch.bfloat16)
    gptj = rotary_tables(table.shape[1] * 16, 32, torch.float32)
    return [
        (f"paged_append-copy-{layout}", ops.paged_append,
         (k, v, k_cache, v_cache, table, lens, None, None, False, None, None, True, layout)),
        (f"paged_append-neox-q_out-{layout}", ops.paged_append,
         (k, v, k_cache, v_cache, table, lens, *neox, False, q, torch.empty_like(q), True, layout)),
        (f"paged_append-gptj-q-in-place-{layout}", ops.paged_append,
         (k, v, k_cache, v_cache, table, lens, *gptj, True, q, None, False, layout)),
        (f"paged_append-contiguous-{layout}", ops.paged_append,
         (k, v, *contiguous, None, lens, None, None, False, None, None, True, layout)),
    ]


@pytest.fixture(scope="module")
def cases():
    return {name: (op, args) for name, op, args in opcheck_cases()}


CASE_NAMES = [f"{case}-{layout}" for layout in ("bhnd", "bnhd") for case in (
    "attention_forward", "attention_forward_out", "attention_forward_out-no-lse", "attention_backward",
    "attention_backward_out", "attention_double_backward", "attention_double_backward-gk-only",
    "lrpe_cosine_forward-silu", "lrpe_cosine_forward-softmax_seq", "lrpe_cosine_backward", "md_lrpe_cosine_forward",
    "md_lrpe_cosine_forward_cached", "md_lrpe_cosine_backward", "md_lrpe_cosine_backward-cached",
    "attention_forward-mla", "attention_forward_out-mla", "attention_backward-mla", "attention_backward_out-mla",
    "attention_forward_variant-window-softcap-sinks", "attention_forward_variant-alibi-documents",
    "attention_forward_variant-expression", "attention_forward_variant_out-window-softcap-sinks",
    "attention_forward_variant_out-alibi-documents-no-lse", "attention_backward_variant-window-softcap-sinks",
    "attention_backward_variant-learnable", "attention_double_backward_variant-window-softcap-sinks",
    "paged_attention_forward-causal",
    "paged_attention_forward-window-softcap-sinks", "paged_attention_forward-no-seqlens", "paged_append-copy",
    "paged_append-neox-q_out", "paged_append-gptj-q-in-place", "paged_append-contiguous")] + [
    f"{op}-{case}" for op in ("varlen_attention_forward", "varlen_attention_backward", "varlen_attention_double_backward")
    for case in ("causal", "window-softcap-sinks")]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_opcheck(cases, name):
    op, args = cases[name]
    torch.library.opcheck(op, args)


def test_every_operator_has_an_opcheck_case():
    checked = {name.split("-")[0] for name in CASE_NAMES}
    registered = {n for n in dir(ops) if not n.startswith("_") and n != "name"}
    assert registered <= checked, registered - checked


# --- the direct kernels are the operators --------------------------------------------------------

@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_direct_kernels_match_the_operators(layout):
    q, k, v = attention_args(layout)
    o, lse = ops.attention_forward(q, k, v, None, True, layout)
    o2, lse2 = _kernels.attention_forward(q, k, v, None, True, layout)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    assert kgen.torch._eager(q)
    assert torch.equal(kgen.torch.attention_forward(q, k, v, causal=True, layout=layout), o)
    d_o = randn(q.shape, seed=4)
    a = ops.attention_backward(q, k, v, o, lse, d_o, None, True, layout, True, None)
    b = kgen.torch.attention_backward(q, k, v, o, lse, d_o, causal=True, layout=layout, deterministic=True)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# --- fake errors are eager errors ------------------------------------------------------------------

INVALID_CALLS = {  # name: f(make) with make(shape, dtype=bf16) building the tensors
    "heads": lambda m: kgen.torch.attention_forward(m((2, 50, 8, 64)), m((2, 50, 3, 64)), m((2, 50, 3, 64)),
                                                    layout="bnhd"),
    "head dim": lambda m: kgen.torch.attention(m((1, 4, 50, 64)), m((1, 4, 50, 32)), m((1, 4, 50, 32))),
    "3-d q": lambda m: kgen.torch.attention_forward(m((4, 50, 64)), m((1, 4, 50, 64)), m((1, 4, 50, 64))),
    "dtype": lambda m: kgen.torch.attention_forward(m((1, 4, 50, 64), torch.float16), m((1, 4, 50, 64)),
                                                    m((1, 4, 50, 64))),
    "float64": lambda m: kgen.torch.attention_forward(*(m((1, 4, 50, 64), torch.float64),) * 3),
    "d_o": lambda m: kgen.torch.attention_backward(*(m((1, 4, 50, 64)),) * 4, m((1, 4, 50), torch.float32),
                                                   m((1, 4, 50, 32))),
    "lrpe theta": lambda m: kgen.torch.lrpe_cosine(m((1, 2, 16, 32)), m((3, 32), torch.float32)),
    "lrpe 2-d x": lambda m: kgen.torch.lrpe_cosine(m((16, 32)), m((1, 32), torch.float32)),
    "md grid": lambda m: kgen.torch.md_lrpe_cosine(m((1, 2, 16, 32)), m((2, 16), torch.float32), shape=(3, 5)),
    "md theta e": lambda m: kgen.torch.md_lrpe_cosine(m((1, 2, 15, 32)), m((2, 8), torch.float32), shape=(3, 5)),
}


@pytest.mark.parametrize("name", INVALID_CALLS)
def test_fake_errors_are_eager_errors(name):
    call = INVALID_CALLS[name]
    with pytest.raises(kgen.KgenError) as eager:
        call(lambda shape, dtype=torch.bfloat16: torch.zeros(shape, dtype=dtype, device="cuda"))
    with FakeTensorMode(), pytest.raises(kgen.KgenError) as fake:
        call(lambda shape, dtype=torch.bfloat16: torch.empty(shape, dtype=dtype, device="cuda"))
    assert str(fake.value) == str(eager.value)
    assert fake.value.status == eager.value.status == kgen.Status.INVALID_ARGUMENT


# --- autocast --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_attention(dtype):
    q, k, v = (t.float().requires_grad_(True) for t in attention_args("bhnd"))
    with torch.autocast("cuda", dtype=dtype):
        o = kgen.torch.attention(q, k, v, causal=True, deterministic=True)
        raw = kgen.torch.attention_forward(q, k, v, causal=True)
        op_o, op_lse = ops.attention_forward(q, k, v, None, True, "bhnd")
    assert o.dtype == raw.dtype == op_o.dtype == dtype and op_lse.dtype == torch.float32
    low = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
    o_low = kgen.torch.attention(*low, causal=True, deterministic=True)
    assert torch.equal(o, o_low) and torch.equal(raw, o_low) and torch.equal(op_o, o_low)
    d_o = randn(o.shape, dtype, 11)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    grads_low = torch.autograd.grad(o_low, low, d_o)
    for g, g_low, x in zip(grads, grads_low, (q, k, v)):
        assert g.dtype == torch.float32 and g.shape == x.shape
        assert torch.equal(g, g_low.float())
    o32 = kgen.torch.attention(q, k, v, causal=True)  # outside autocast: fp32 math
    assert o32.dtype == torch.float32
    check = compare("o fp32", o32, attention_math(*(t.detach().double() for t in (q, k, v)), causal=True), bound=1e-5)
    assert check.ok, str(check)


def test_autocast_lrpe():
    x = randn((2, 3, 40, 32), torch.float32, 1).requires_grad_(True)
    th = theta(3, 32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        o = kgen.torch.lrpe_cosine(x, th, act="silu")
        md = kgen.torch.md_lrpe_cosine(x, th[:, :16], shape=(5, 8), cache=True)
        raw = ops.lrpe_cosine_forward(x, th, 0, "silu", "bhnd", None)
    assert o.dtype == md.dtype == raw.dtype == torch.bfloat16
    assert torch.equal(o, kgen.torch.lrpe_cosine(x.detach().bfloat16(), th, act="silu")) and torch.equal(o, raw)
    o.float().sum().backward()
    assert x.grad.dtype == torch.float32
    ref = lrpe_reference(x.detach().bfloat16(), th, act="silu")
    check = compare("o", o, ref, bound=1e-2)
    assert check.ok, str(check)
    assert kgen.torch.lrpe_cosine(x, th).dtype == torch.float32


def test_autocast_leaves_float64_alone():
    q = torch.zeros((1, 2, 8, 64), dtype=torch.float64, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16), pytest.raises(kgen.KgenError, match=r"^q: dtype \(code 2, 64"):
        kgen.torch.attention_forward(q, q, q)


def test_autocast_under_compile():
    torch._dynamo.reset()
    q, k, v = (t.float() for t in attention_args("bnhd"))

    def f(q, k, v):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return kgen.torch.attention(q, k, v, causal=True, layout="bnhd")

    o = torch.compile(f, fullgraph=True)(q, k, v)
    assert o.dtype == torch.bfloat16
    assert torch.equal(o, kgen.torch.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True, layout="bnhd"))


# --- torch.compile -----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_matches_eager(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = AttentionBlock(128, 4).cuda().to(torch.bfloat16)
    x = randn((2, 200, 128), torch.bfloat16, 5).requires_grad_(True)
    d_y = randn((2, 200, 128), torch.bfloat16, 6)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    results = []
    for fn in (model, compiled):
        x.grad = None
        model.zero_grad()
        y = fn(x)
        y.backward(d_y)
        results.append([y.detach(), x.grad.clone(), model.qkv.weight.grad.clone()])
    for name, eager, traced in zip(("y", "dx", "d_qkv_weight"), *results):
        check = compare(name, traced, eager, bound=1e-2)
        assert check.ok, str(check)


def test_double_backward_is_eager_only():
    """aot_autograd refuses double backward through a compiled graph; the same function in eager
    mode runs it on kgen's double-backward kernels."""
    torch._dynamo.reset()

    def second_order(q, k, v):
        o = kgen.torch.attention(q, k, v)
        (dq,) = torch.autograd.grad(o.float().square().sum(), (q,), create_graph=True)
        return torch.autograd.grad(dq.float().sum(), (q,))[0]

    def first_order_compiled(q, k, v):
        return torch.compile(kgen.torch.attention, fullgraph=True)(q, k, v)

    q, k, v = (t.requires_grad_(True) for t in attention_args("bhnd", torch.float16))
    with pytest.raises(RuntimeError, match="double backward"):
        o = first_order_compiled(q, k, v)
        (dq,) = torch.autograd.grad(o.float().square().sum(), (q,), create_graph=True)
        torch.autograd.grad(dq.float().sum(), (q,))
    q_bar = second_order(q, k, v)
    assert torch.isfinite(q_bar).all() and q_bar.abs().max() > 0


# --- CUDA graphs and threads --------------------------------------------------------------------------

def test_cuda_graph_capture_and_replay():
    q, k, v = attention_args("bnhd")
    x, th = randn((2, 3, 40, 32), torch.float16, 8), theta(3, 32)
    q0, x0 = q.clone(), x.clone()

    def step():
        return (kgen.torch.attention_forward(q, k, v, causal=True, layout="bnhd"),
                kgen.torch.lrpe_cosine(x, th, act="softmax", dim=-2))

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm: compile and cache the kernels outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_graph, lrpe_graph = step()
    q.copy_(randn(q.shape, seed=21))
    x.copy_(randn(x.shape, torch.float16, 22))
    graph.replay()
    o_eager, lrpe_eager = step()
    torch.cuda.synchronize()
    assert torch.equal(o_graph, o_eager) and torch.equal(lrpe_graph, lrpe_eager)
    assert not torch.equal(o_eager, kgen.torch.attention_forward(q0, k, v, causal=True, layout="bnhd"))
    assert not torch.equal(lrpe_eager, kgen.torch.lrpe_cosine(x0, th, act="softmax", dim=-2))


def test_calls_from_several_threads():
    shapes = [(1, 4, 33 + 17 * i, 64) for i in range(6)]
    inputs = [(randn(s, seed=i), randn(s, seed=i + 50), randn(s, seed=i + 90)) for i, s in enumerate(shapes)]
    expected = [kgen.torch.attention_forward(*t, causal=True) for t in inputs]
    torch.cuda.synchronize()
    failures = []

    def work(worker):
        try:
            for rep in range(20):
                i = (worker + rep) % len(inputs)
                o = kgen.torch.attention_forward(*inputs[i], causal=True)
                torch.cuda.current_stream().synchronize()
                if not torch.equal(o, expected[i]):
                    failures.append((worker, rep, i))
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append((worker, repr(e)))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
