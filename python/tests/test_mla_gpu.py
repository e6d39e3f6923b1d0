"""GPU tests of v head dims below q's (MLA's 192/128, docs/attention.md §1): kgen.torch.attention's
output, gradients and second-order gradients, attention_forward's out= and lse, kgen.flash_attn_interface.flash_attn_func
(FlashAttention 3 accepts hdim 192/128), and torch.compile's fake kernels, each against a float64
autograd reference of the same rounded inputs with the pass rule of test_variant_gpu.py (rel_l2,
cosine, the row rule, lse per element); outputs given to kgen are NaN-poisoned first. bf16 and
fp16 (fa2) and fp32 (the general path), odd sizes, GQA, causal with n_q != n_k (rows that see no
key), both layouts. What kgen does not serve at these shapes (variants) is refused with a KgenError
naming v. Skipped unless PyTorch with CUDA and libkgen.so are available."""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from kgen import KgenError  # noqa: E402
from kgen import flash_attn_interface as fa  # noqa: E402
from kgen.testing import REL_L2_BOUND  # noqa: E402
from test_variant_gpu import check, check_gradient  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

DEVICE = "cuda"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# (d_qk, d_v): MLA's, pairs each tile pads differently, and d_v not a multiple of 8 (general path)
PAIRS = [(192, 128), (64, 32), (128, 64), (96, 64), (256, 128), (72, 40), (64, 36)]
# (b, h_q, h_kv, n_q, n_k): odd sizes, GQA 4 and 1, n_q > n_k (causal rows that see no key)
SHAPES = [(1, 2, 1, 7, 7), (2, 8, 2, 130, 257), (1, 4, 4, 300, 129)]


def randn(shape, dtype, seed):
    return torch.randn(shape, generator=torch.Generator(device=DEVICE).manual_seed(seed), device=DEVICE).to(dtype)


def forward64(q, k, v, causal, scale=None):
    """(o, lse) of float64 leaves by differentiable torch ops, logical (b, h, n, d) tensors."""
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ kk.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    n_q, n_k = q.shape[2], k.shape[2]
    hidden = torch.zeros(n_q, n_k, dtype=torch.bool, device=DEVICE)
    if causal:
        hidden = torch.arange(n_k, device=DEVICE)[None, :] > torch.arange(n_q, device=DEVICE)[:, None] + (n_k - n_q)
    empty = hidden.all(-1, keepdim=True)  # rows that see no key: o = 0, lse = -inf, no gradient
    s = s.masked_fill(hidden, -math.inf).masked_fill(empty, 0.0)
    lse = torch.logsumexp(s.detach(), -1).masked_fill(empty.squeeze(-1), -math.inf)
    p = torch.softmax(s, -1).masked_fill(hidden, 0.0)
    return p @ vv, lse


def reference(q, k, v, d_o, causal, scale=None):
    """(o, lse, dq, dk, dv) in float64 by autograd, logical (b, h, n, d) tensors."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    o, lse = forward64(q, k, v, causal, scale)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), d_o.double())
    return o.detach(), lse.detach(), dq, dk, dv


def second_order_reference(q, k, v, d_o, cotangents, causal):
    """(q_bar, k_bar, v_bar, do_bar) in float64 by autograd through autograd: the gradients of
    Σ gq∘dq + gk∘dk + gv∘dv with respect to q, k, v and d_o."""
    q, k, v, d_o = (t.detach().double().requires_grad_() for t in (q, k, v, d_o))
    o, _ = forward64(q, k, v, causal)
    first = torch.autograd.grad(o, (q, k, v), d_o, create_graph=True)
    return torch.autograd.grad(first, (q, k, v, d_o), [c.double() for c in cotangents])


def inputs(shape, d, dv, dtype, seed, layout="bhnd"):
    """q, k, v, d_o in `layout` (bnhd: (b, n, h, d) tensors) and their logical (b, h, n, d) views."""
    b, h_q, h_kv, n_q, n_k = shape
    dims = {"q": (h_q, n_q, d), "k": (h_kv, n_k, d), "v": (h_kv, n_k, dv), "d_o": (h_q, n_q, dv)}
    out = []
    for i, (h, n, c) in enumerate(dims.values()):
        t = randn((b, h, n, c), dtype, seed + i)
        out.append(t.transpose(1, 2).contiguous() if layout == "bnhd" else t)
    logical = [t.transpose(1, 2) if layout == "bnhd" else t for t in out]
    return out, logical


def params():
    for d, dv in PAIRS:
        for name in ("bf16", "fp16", "fp32"):
            if name == "fp16" and (d, dv) not in ((192, 128), (64, 32)):
                continue
            if name == "fp32" and (d, dv) not in ((192, 128), (64, 36)):
                continue
            for causal in (False, True):
                yield pytest.param(d, dv, name, causal, id=f"{name}-d{d}v{dv}-{'causal' if causal else 'full'}")


@pytest.mark.parametrize("d,dv,dtype_name,causal", list(params()))
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_attention_output_and_gradients_match_float64(d, dv, dtype_name, causal, layout):
    dtype = DTYPES[dtype_name]
    bound = REL_L2_BOUND[dtype]
    for shape in SHAPES:
        (q, k, v, d_o), (lq, lk, lv, ldo) = inputs(shape, d, dv, dtype, 17 * d + dv + causal, layout)
        o_ref, lse_ref, dq_ref, dk_ref, dv_ref = reference(lq, lk, lv, ldo, causal)
        what = f"{dtype_name} d{d}/v{dv} {shape} {layout} causal={causal}"
        # The forward on poisoned buffers, with lse.
        out = torch.full_like(d_o, float("nan"))
        o, lse = kgen.torch.attention_forward(q, k, v, causal=causal, layout=layout, out=out, return_lse=True)
        assert o.data_ptr() == out.data_ptr() and o.shape[-1] == dv
        lo = o.transpose(1, 2) if layout == "bnhd" else o
        check(lo, lse, o_ref, lse_ref, dtype, what)
        # Differentiable attention: o and the gradients (dv with v's head dim).
        for deterministic in (False, True):
            leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
            o = kgen.torch.attention(*leaves, causal=causal, layout=layout, deterministic=deterministic)
            assert o.shape == d_o.shape
            o.backward(d_o)
            for name, leaf, ref in zip(("dq", "dk", "dv"), leaves, (dq_ref, dk_ref, dv_ref)):
                got = leaf.grad.transpose(1, 2) if layout == "bnhd" else leaf.grad
                check_gradient(name, got, ref, bound, True, f"{what} deterministic={deterministic}")


@pytest.mark.parametrize("dtype_name", ["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_takes_hdim_192_128(dtype_name, causal):
    dtype = DTYPES[dtype_name]
    (q, k, v, d_o), (lq, lk, lv, ldo) = inputs((2, 16, 4, 333, 500), 192, 128, dtype, 5, "bnhd")
    o_ref, lse_ref, dq_ref, dk_ref, dv_ref = reference(lq, lk, lv, ldo, causal, scale=0.1)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse, _ = fa.flash_attn_func(*leaves, softmax_scale=0.1, causal=causal, return_attn_probs=True)
    assert out.shape == (2, 333, 16, 128)
    check(out.transpose(1, 2), lse, o_ref, lse_ref, dtype, f"flash_attn_func {dtype_name} causal={causal}")
    out.backward(d_o)
    for name, leaf, ref in zip(("dq", "dk", "dv"), leaves, (dq_ref, dk_ref, dv_ref)):
        check_gradient(name, leaf.grad.transpose(1, 2), ref, REL_L2_BOUND[dtype], True, f"flash_attn_func {name}")


def test_torch_compile_traces_the_v_head_dim():
    (q, k, v, d_o), (lq, lk, lv, ldo) = inputs((1, 4, 2, 100, 100), 192, 128, torch.bfloat16, 9)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    f = torch.compile(lambda q, k, v: kgen.torch.attention(q, k, v, causal=True), fullgraph=True)
    o = f(*leaves)
    assert o.shape == (1, 4, 100, 128)
    o.backward(d_o)
    o_ref, _, dq_ref, dk_ref, dv_ref = reference(lq, lk, lv, ldo, True)
    check_gradient("o", o.detach(), o_ref, REL_L2_BOUND[torch.bfloat16], True, "compiled")
    for name, leaf, ref in zip(("dq", "dk", "dv"), leaves, (dq_ref, dk_ref, dv_ref)):
        check_gradient(name, leaf.grad, ref, REL_L2_BOUND[torch.bfloat16], True, f"compiled {name}")


# The double backward's bounds (test_autograd_gpu.py's): second-order terms sum more products.
SECOND = {torch.float16: 2e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}


@pytest.mark.parametrize("d,dv,dtype_name,causal,layout", [
    (192, 128, "bf16", True, "bhnd"), (192, 128, "bf16", False, "bnhd"), (192, 128, "fp16", True, "bnhd"),
    (64, 32, "bf16", False, "bhnd"), (128, 64, "fp16", True, "bhnd"), (256, 128, "bf16", True, "bhnd"),
    (64, 36, "bf16", True, "bhnd"), (192, 128, "fp32", True, "bhnd")])
def test_second_order_gradients_match_float64(d, dv, dtype_name, causal, layout):
    """Differentiating kgen's gradients again (kgen's double backward: fa2 for 16-bit pairs of
    multiples of 8, the general path otherwise) against autograd through float64 autograd; do_bar
    and v_bar have v's head dim."""
    dtype = DTYPES[dtype_name]
    for shape in SHAPES:
        (q, k, v, d_o), (lq, lk, lv, ldo) = inputs(shape, d, dv, dtype, 31 * d + dv + causal, layout)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, d_o)]
        cotangents = [randn(t.shape, dtype, 90 + i) for i, t in enumerate((q, k, v))]
        o = kgen.torch.attention(*leaves[:3], causal=causal, layout=layout)
        first = torch.autograd.grad(o, leaves[:3], leaves[3], create_graph=True)
        second = torch.autograd.grad(first, leaves, cotangents)
        logical = (lambda t: t.transpose(1, 2)) if layout == "bnhd" else (lambda t: t)
        ref = second_order_reference(lq, lk, lv, ldo, [logical(c) for c in cotangents], causal)
        for name, got, want in zip(("q_bar", "k_bar", "v_bar", "do_bar"), second, ref):
            assert got.shape[-1] == (dv if name in ("v_bar", "do_bar") else d), name
            check_gradient(name, logical(got), want, SECOND[dtype], True,
                           f"{dtype_name} d{d}/v{dv} {shape} {layout} causal={causal}")


def test_what_is_not_served_is_refused_naming_v():
    (q, k, v, d_o), _ = inputs((1, 2, 2, 64, 64), 192, 128, torch.bfloat16, 3)
    # A variant.
    with pytest.raises(KgenError, match="v: head dim 128 differs from q's 192"):
        kgen.torch.attention(q, k, v, window=(16, 0))
    # v wider than q.
    with pytest.raises(KgenError, match="v: head dim 256 must be at most q's 192"):
        kgen.torch.attention(q, k, torch.zeros(1, 2, 64, 256, dtype=torch.bfloat16, device=DEVICE))
