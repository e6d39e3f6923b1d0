"""GPU tests of kgen.torch.attention's first- and second-order gradients against PyTorch autograd
on the float64 math path (docs/attention.md §3–§5): O(1) losses with random weights, dO that
depends on the inputs, every cotangent present and absent, NaN-free outputs, odd sizes, GQA,
BHND and BNHD. Skipped unless PyTorch with CUDA and libkgen.so are available."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from kgen.testing import COS_BOUND, attention_math, compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# rel_l2 bounds (docs/attention.md §5.2; check/metrics.h second_order_tolerance_for): 16-bit second
# order rounds P, dS, S̄, H to 16 bits for the tensor cores, hence 2e-2; fp32 is plain math.
FIRST = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float32: 1e-5}
SECOND = {torch.float16: 2e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}


def make(shape, dtype, gen, layout):
    b, h, n, d = shape
    t = torch.randn((b, n, h, d) if layout == "bnhd" else shape, generator=gen)
    return t.to(dtype).cuda()


def logical(t, layout):
    return t.transpose(1, 2) if layout == "bnhd" else t


def problem(b, h_q, h_kv, n_q, n_k, d, dtype, layout, seed):
    gen = torch.Generator().manual_seed(seed)
    q = make((b, h_q, n_q, d), dtype, gen, layout)
    k = make((b, h_kv, n_k, d), dtype, gen, layout)
    v = make((b, h_kv, n_k, d), dtype, gen, layout)
    r = make((b, h_q, n_q, d), torch.float32, gen, layout)
    return q, k, v, r


def run(fn, q, k, v, r, *, layout, cotangents, weights):
    """First-order grads of L1 = Σ r∘o + ½Σ o² (so dO = r + o depends on q, k, v), then the
    second-order grads of L2 = Σ ⟨w, d·⟩ over the chosen cotangents."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    o = fn(q, k, v)
    of = o.float()
    l1 = (r * of).sum() + 0.5 * (of * of).sum()
    grads = torch.autograd.grad(l1, (q, k, v), create_graph=bool(cotangents))
    if not cotangents:
        return grads, None
    l2 = sum((weights[i] * grads[i].float()).sum() for i in cotangents)
    second = torch.autograd.grad(l2, (q, k, v), allow_unused=True)
    return grads, second


# An exactly-zero reference (e.g. dq with a single visible key: P = 1, dS = 0) has no relative
# error; the output must then be zero up to rounding noise of this size.
ZERO_ATOL = {torch.float16: 1e-3, torch.bfloat16: 1e-3, torch.float32: 1e-5}


def check(name, out, ref, bound):
    assert torch.isfinite(out).all(), f"{name}: NaN/Inf"
    if ref.abs().max() == 0:
        assert out.abs().max() <= ZERO_ATOL[out.dtype], f"{name}: max |out| {out.abs().max():.2e} where the reference is 0"
        return
    c = compare(name, out.double(), ref.double(), bound=bound, cos_bound=COS_BOUND)
    assert c.ok, str(c)


CASES = [  # (b, h_q, h_kv, n_q, n_k, d)
    (1, 1, 1, 1, 1, 64), (1, 2, 1, 7, 63, 64), (2, 4, 1, 63, 7, 128), (1, 4, 4, 130, 130, 128),
    (1, 8, 2, 257, 200, 64), (1, 2, 2, 1000, 1000, 32), (1, 2, 1, 333, 333, 96),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}h{}kv{}nq{}nk{}d{}".format(*c))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
def test_first_and_second_order(case, causal, layout, dtype):
    b, h_q, h_kv, n_q, n_k, d = case
    dt = DTYPES[dtype]
    q, k, v, r = problem(b, h_q, h_kv, n_q, n_k, d, dt, layout, seed=n_q * 31 + d)
    gen = torch.Generator().manual_seed(7)
    weights = [torch.randn(t.shape, generator=gen).cuda() for t in (q, k, v)]

    def kgen_fn(q, k, v):
        return kgen.torch.attention(q, k, v, causal=causal, layout=layout)

    def math_fn(q, k, v):
        o = attention_math(*(logical(t, layout) for t in (q, k, v)), causal=causal)
        return o.transpose(1, 2) if layout == "bnhd" else o

    ref64 = [t.double() for t in (q, k, v)]
    for cot in [(0, 1, 2), (0,), (1,), (2,)]:
        g, s = run(kgen_fn, q, k, v, r, layout=layout, cotangents=cot, weights=weights)
        g_ref, s_ref = run(math_fn, *ref64, r.double(), layout=layout, cotangents=cot,
                           weights=[w.double() for w in weights])
        for name, a, e in zip(("dq", "dk", "dv"), g, g_ref):
            check(name, a, e, FIRST[dt])
        for name, a, e in zip(("q_bar", "k_bar", "v_bar"), s, s_ref):
            if e is None:
                assert a is None or a.abs().max() <= ZERO_ATOL[a.dtype], f"{name}: nonzero where the reference is 0"
                continue
            check(f"{name} (cotangents {cot})", a, e, SECOND[dt])


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_deterministic_backward_is_bitwise_repeatable(dtype, causal):
    dt = DTYPES[dtype]
    q, k, v, r = problem(2, 8, 2, 1337, 1337, 128, dt, "bhnd", seed=3)
    o, lse = kgen.torch.attention_forward(q, k, v, causal=causal, return_lse=True)
    d_o = r.to(dt)
    runs = [kgen.torch.attention_backward(q, k, v, o, lse, d_o, causal=causal, deterministic=True) for _ in range(3)]
    for other in runs[1:]:
        for a, e in zip(runs[0], other):
            assert torch.equal(a, e)
    fast = kgen.torch.attention_backward(q, k, v, o, lse, d_o, causal=causal)
    for name, a, e in zip(("dq", "dk", "dv"), fast, runs[0]):
        check(name, a, e, FIRST[dt])


def test_backward_outputs_poisoned_are_overwritten():
    q, k, v, r = problem(1, 4, 4, 300, 300, 64, torch.bfloat16, "bhnd", seed=5)
    o, lse = kgen.torch.attention_forward(q, k, v, return_lse=True)
    outs = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    kgen.torch.attention_backward(q, k, v, o, lse, r.to(q.dtype), dq=outs[0], dk=outs[1], dv=outs[2])
    for t in outs:
        assert torch.isfinite(t).all()


def test_double_backward_rejects_bad_cotangent():
    q, k, v, r = problem(1, 2, 2, 64, 64, 64, torch.float16, "bhnd", seed=9)
    o, lse = kgen.torch.attention_forward(q, k, v, return_lse=True)
    with pytest.raises(kgen.torch.KgenError, match="gk"):
        kgen.torch.attention_double_backward(q, k, v, o, lse, r.half(), None, q[:, :, :10], None)


def test_second_grad_with_independent_d_o_runs_only_the_double_backward():
    """When dO is a leaf of its own, o gets no second-order gradient: the second grad must not run
    a first-order backward (on zeros) besides the double backward, and must still match."""
    dt = torch.float16
    q, k, v, r = problem(1, 2, 2, 200, 200, 64, dt, "bhnd", seed=11)
    ins = [t.detach().requires_grad_(True) for t in (q, k, v, r.to(dt))]
    w = [torch.randn_like(t) for t in ins[:3]]
    o = kgen.torch.attention(*ins[:3])
    first = torch.autograd.grad(o, ins[:3], ins[3], create_graph=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        second = torch.autograd.grad(first, ins, w)
        torch.cuda.synchronize()
    kernels = {e.name for e in prof.events() if e.name.startswith("kgen_")}
    assert any("double_bwd" in name for name in kernels), kernels
    first_order = {name for name in kernels if "double_bwd" not in name and not name.endswith("preprocess")}
    assert not first_order, f"first-order kernels ran in the second grad: {sorted(first_order)}"
    ref_ins = [t.detach().double().requires_grad_(True) for t in ins]
    ref_first = torch.autograd.grad(attention_math(*ref_ins[:3]), ref_ins[:3], ref_ins[3], create_graph=True)
    ref = torch.autograd.grad(ref_first, ref_ins, [x.double() for x in w])
    for name, a, e in zip(("q_bar", "k_bar", "v_bar", "do_bar"), second, ref):
        check(name, a, e, SECOND[dt])
