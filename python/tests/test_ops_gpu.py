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
    return cases


@pytest.fixture(scope="module")
def cases():
    return {name: (op, args) for name, op, args in opcheck_cases()}


CASE_NAMES = [f"{case}-{layout}" for layout in ("bhnd", "bnhd") for case in (
    "attention_forward", "attention_forward_out", "attention_forward_out-no-lse", "attention_backward",
    "attention_backward_out", "attention_double_backward", "attention_double_backward-gk-only",
    "lrpe_cosine_forward-silu", "lrpe_cosine_forward-softmax_seq", "lrpe_cosine_backward", "md_lrpe_cosine_forward",
    "md_lrpe_cosine_forward_cached", "md_lrpe_cosine_backward", "md_lrpe_cosine_backward-cached")]


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
