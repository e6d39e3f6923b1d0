"""GPU tests of kgen.torch.varlen_attention (packed batches, docs/attention.md §9): o, lse and the
gradients of q, k, v and sinks for long-tailed sequence lengths (empty and one-row sequences
among them), GQA, causal and window + softcap + sinks, each sequence against a float64 reference
of its own rows (docs/attention.md §5.2's rule with the row rule); torch.compile(fullgraph=True);
and errors that name the argument. Skipped unless PyTorch with CUDA and libkgen.so are available."""
import math
import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from test_variant_gpu import check, check_gradient  # noqa: E402

from kgen.testing import REL_L2_BOUND  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")
DEVICE = "cuda"


def _lengths(count, seed):
    """Long-tailed (lognormal) lengths with an empty and a one-row sequence among them."""
    draw = random.Random(seed)
    lengths = [min(2000, int(draw.lognormvariate(5.0, 1.0))) for _ in range(count)]
    lengths[1], lengths[2] = 0, 1
    return lengths


def _cu(lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device=DEVICE)


def _reference(q, k, v, lq, lk, causal, scale, window=None, softcap=0.0, sinks=None):
    """float64 o (total_q, h, d) and lse (h, total_q) of each sequence's own rows."""
    h_q, h_kv = q.shape[1], k.shape[1]
    outs, lses = [], []
    q0 = k0 = 0
    for nq, nk in zip(lq, lk):
        qs = q[q0:q0 + nq].double().transpose(0, 1)
        ks = k[k0:k0 + nk].double().transpose(0, 1).repeat_interleave(h_q // h_kv, 0)
        vs = v[k0:k0 + nk].double().transpose(0, 1).repeat_interleave(h_q // h_kv, 0)
        s = qs @ ks.transpose(1, 2) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(nq, device=DEVICE)[:, None] + (nk - nq)
        j = torch.arange(nk, device=DEVICE)[None, :]
        visible = torch.ones(nq, nk, dtype=torch.bool, device=DEVICE)
        if causal:
            visible &= j <= i
        if window is not None:
            visible &= j >= i - window[0]
        s = s.masked_fill(~visible, -math.inf)
        if sinks is not None:
            s = torch.cat([s, sinks.double()[:, None, None].expand(h_q, nq, 1)], dim=2)
        lse = torch.logsumexp(s, dim=2)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        if sinks is not None:
            p = p[..., :nk]
        outs.append((p @ vs).transpose(0, 1))
        lses.append(lse)
        q0, k0 = q0 + nq, k0 + nk
    return torch.cat(outs), torch.cat(lses, dim=1)


CASES = {
    "causal_bf16_d128": dict(dtype=torch.bfloat16, h=(4, 4), d=128, causal=True),
    "full_f16_d64_gqa": dict(dtype=torch.float16, h=(8, 2), d=64, causal=False),
    "causal_fp32_d80": dict(dtype=torch.float32, h=(2, 1), d=80, causal=True),
    "window_softcap_sinks_bf16_d64": dict(dtype=torch.bfloat16, h=(4, 2), d=64, causal=True, window=(96, 0),
                                          softcap=30.0, sinks=True),
}


def _inputs(case, seed):
    lengths = _lengths(10, seed)
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    total = sum(lengths)
    h_q, h_kv = case["h"]
    dtype, d = case["dtype"], case["d"]
    q = torch.randn(total, h_q, d, generator=g, device=DEVICE).to(dtype)
    k = torch.randn(total, h_kv, d, generator=g, device=DEVICE).to(dtype)
    v = torch.randn(total, h_kv, d, generator=g, device=DEVICE).to(dtype)
    sinks = (torch.randn(h_q, generator=g, device=DEVICE) * 1.5) if case.get("sinks") else None
    return lengths, q, k, v, sinks


def _keywords(case, sinks):
    keywords = {}
    if "window" in case:
        keywords["window"] = case["window"]
    if case.get("softcap"):
        keywords["softcap"] = case["softcap"]
    if sinks is not None:
        keywords["sinks"] = sinks
    return keywords


@pytest.mark.parametrize("name", CASES)
def test_forward_matches_each_sequence(name):
    case = CASES[name]
    lengths, q, k, v, sinks = _inputs(case, 11)
    cu = _cu(lengths)
    o, lse = kgen.torch.varlen_attention(q, k, v, cu, cu, max(lengths), max(lengths), causal=case["causal"],
                                         return_lse=True, **_keywords(case, sinks))
    scale = 1.0 / math.sqrt(case["d"])
    o_ref, lse_ref = _reference(q, k, v, lengths, lengths, case["causal"], scale, case.get("window"),
                                case.get("softcap", 0.0), sinks)
    check(o, lse, o_ref, lse_ref, case["dtype"], name)


@pytest.mark.parametrize("name", CASES)
def test_gradients_match_each_sequence(name):
    case = CASES[name]
    lengths, q, k, v, sinks = _inputs(case, 23)
    cu = _cu(lengths)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sinks_leaf = sinks.detach().clone().requires_grad_() if sinks is not None else None
    o = kgen.torch.varlen_attention(*leaves, cu, cu, max(lengths), max(lengths), causal=case["causal"],
                                    **_keywords(case, sinks_leaf))
    d_o = torch.randn_like(o)
    o.backward(d_o)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_sinks = sinks.detach().double().requires_grad_() if sinks is not None else None
    o_ref, _ = _reference(*ref_leaves, lengths, lengths, case["causal"], 1.0 / math.sqrt(case["d"]),
                          case.get("window"), case.get("softcap", 0.0), ref_sinks)
    o_ref.backward(d_o.double())
    bound = 2 * REL_L2_BOUND[case["dtype"]]
    for label, got, ref in zip("qkv", leaves, ref_leaves):
        check_gradient(f"d{label}", got.grad, ref.grad, bound, True, name)
    if sinks is not None:
        check_gradient("dsinks", sinks_leaf.grad, ref_sinks.grad, bound, False, name)


def test_cross_lengths_and_empty_sequences():
    lq, lk = [100, 0, 300, 1, 64, 5], [700, 50, 300, 129, 64, 0]
    g = torch.Generator(device=DEVICE).manual_seed(5)
    q = torch.randn(sum(lq), 4, 128, generator=g, device=DEVICE).bfloat16()
    k = torch.randn(sum(lk), 2, 128, generator=g, device=DEVICE).bfloat16()
    v = torch.randn(sum(lk), 2, 128, generator=g, device=DEVICE).bfloat16()
    o, lse = kgen.torch.varlen_attention(q, k, v, _cu(lq), _cu(lk), max(lq), max(lk), causal=True, return_lse=True)
    o_ref, lse_ref = _reference(q, k, v, lq, lk, True, 1.0 / math.sqrt(128))
    check(o, lse, o_ref, lse_ref, torch.bfloat16, "cross lengths")


def test_compiles_fullgraph():
    lengths = [33, 0, 257, 1, 100]
    g = torch.Generator(device=DEVICE).manual_seed(3)
    q, k, v = (torch.randn(sum(lengths), 2, 64, generator=g, device=DEVICE).bfloat16() for _ in range(3))
    cu = _cu(lengths)

    def f(q, k, v):
        return kgen.torch.varlen_attention(q, k, v, cu, cu, 257, 257, causal=True) * 2

    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), f(q, k, v), rtol=0, atol=0)


def test_errors_name_the_argument():
    q = torch.randn(64, 2, 64, device=DEVICE).bfloat16()
    cu = torch.tensor([0, 32, 64], dtype=torch.int32, device=DEVICE)
    with pytest.raises(kgen.torch.KgenError, match="cu_seqlens_q"):
        kgen.torch.varlen_attention(q, q, q, cu.long(), cu, 32, 32)
    with pytest.raises(kgen.torch.KgenError, match="max_seqlen_k"):
        kgen.torch.varlen_attention(q, q, q, cu, cu, 32, 65)
    with pytest.raises(ValueError, match="document_ids"):
        kgen.torch.varlen_attention(q, q, q, cu, cu, 32, 32, document_ids=cu)
