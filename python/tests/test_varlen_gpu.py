"""GPU tests of kgen.torch.varlen_attention (packed batches, docs/attention.md §9): o, lse and the
gradients of q, k, v and sinks for long-tailed sequence lengths (empty and one-row sequences
among them), GQA, causal and window + softcap + sinks, each sequence against a float64 reference
of its own rows (docs/attention.md §5.2's rule with the row rule); the double backward
(create_graph=True, then a second grad; the raw operator on every family; flash_attn_varlen_func)
against float64 autograd twice through that reference, on NaN-poisoned outputs whose padding rows
must keep their poison; torch.compile(fullgraph=True); and errors that name the argument. Skipped
unless PyTorch with CUDA and libkgen.so are available."""
import math
import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from kgen import _kernels  # noqa: E402
from kgen.flash_attn_interface import flash_attn_varlen_func  # noqa: E402
from test_variant_gpu import SECOND_BOUND, check, check_gradient  # noqa: E402

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


# Lengths at and beside the tile sizes (64, 128, 192 rows), empty and one-row sequences, and a few
# long ones: the warp-specialised kernels' compact grid finds each block's tile by a search over
# cu_seqlens, whose rounds grow past 32 and 1024 sequences.
BOUNDARY_LENGTHS = (0, 1, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 256)


@pytest.mark.parametrize("count", [40, 1100])
@pytest.mark.parametrize("causal", [True, False])
def test_many_sequences_at_tile_boundaries(count, causal):
    draw = random.Random(count + causal)
    lengths = [draw.choice(BOUNDARY_LENGTHS) for _ in range(count)]
    lengths[draw.randrange(count)] = 1000
    lengths[-1] = 129
    g = torch.Generator(device=DEVICE).manual_seed(count)
    total, d = sum(lengths), 64 if causal else 128
    q, k, v = (torch.randn(total, h, d, generator=g, device=DEVICE).bfloat16() for h in (4, 2, 2))
    cu = _cu(lengths)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o, lse = kgen.torch.varlen_attention(*leaves, cu, cu, max(lengths), max(lengths), causal=causal, return_lse=True)
    d_o = torch.randn_like(o)
    o.backward(d_o)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, lse_ref = _reference(*ref_leaves, lengths, lengths, causal, 1.0 / math.sqrt(d))
    name = f"{count} sequences, causal={causal}"
    check(o.detach(), lse, o_ref.detach(), lse_ref.detach(), torch.bfloat16, name)
    o_ref.backward(d_o.double())
    for label, got, ref in zip("qkv", leaves, ref_leaves):
        check_gradient(f"d{label}", got.grad, ref.grad, 2 * REL_L2_BOUND[torch.bfloat16], True, name)


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


# --- the double backward (docs/attention.md §4 and §9) ---------------------------------------------

PAD = 5  # rows no sequence owns, after the last one (q, k and their gradients)

# Causal cases keep n_q <= n_k per sequence, so that every query row sees a key (the float64
# reference's second derivative is NaN on a row that sees none).
DOUBLE_CASES = {
    "causal_bf16_d128": dict(dtype=torch.bfloat16, h=(4, 4), d=128, causal=True),
    "full_f16_d64_gqa": dict(dtype=torch.float16, h=(8, 2), d=64, causal=False),
    "causal_fp32_d33_gqa": dict(dtype=torch.float32, h=(2, 1), d=33, causal=True),
    "window_softcap_sinks_bf16_d64": dict(dtype=torch.bfloat16, h=(4, 2), d=64, causal=True, window=(96, 0),
                                          softcap=30.0, sinks=True),
    "cross_lengths_causal_bf16_d64_gqa": dict(dtype=torch.bfloat16, h=(4, 2), d=64, causal=True,
                                              lengths=([100, 0, 300, 1, 64, 5], [400, 50, 300, 129, 64, 0])),
    "cross_lengths_full_f16_d128": dict(dtype=torch.float16, h=(2, 2), d=128, causal=False,
                                        lengths=([300, 7, 0, 1, 90], [20, 400, 3, 1, 0])),
}


def _double_inputs(case, seed):
    """Lengths, packed q (with PAD rows), k, v (with PAD rows), d_o like q, the cotangents gq, gk,
    gv, and the sinks (constants)."""
    lq, lk = case.get("lengths") or (_lengths(8, seed),) * 2
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    h_q, h_kv = case["h"]
    dtype, d = case["dtype"], case["d"]

    def randn(rows, h):
        return torch.randn(rows, h, d, generator=g, device=DEVICE).to(dtype)

    q, k, v = randn(sum(lq) + PAD, h_q), randn(sum(lk) + PAD, h_kv), randn(sum(lk) + PAD, h_kv)
    d_o, gq, gk, gv = randn(q.shape[0], h_q), randn(q.shape[0], h_q), randn(k.shape[0], h_kv), randn(k.shape[0], h_kv)
    sinks = (torch.randn(h_q, generator=g, device=DEVICE) * 1.5) if case.get("sinks") else None
    return lq, lk, (q, k, v, d_o), (gq, gk, gv), sinks


def _double_reference(case, lq, lk, inputs, cotangents, sinks):
    """float64 (q̄, k̄, v̄, dŌ): autograd twice through _reference, sequence by sequence (rows no
    sequence owns get 0)."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    o, _ = _reference(*leaves[:3], lq, lk, case["causal"], 1.0 / math.sqrt(case["d"]), case.get("window"),
                      case.get("softcap", 0.0), None if sinks is None else sinks.double())
    first = torch.autograd.grad(o, leaves[:3], leaves[3][:sum(lq)], create_graph=True)
    return torch.autograd.grad(first, leaves, [t.double() for t in cotangents])


_kernels_outputs = _kernels._double_backward_outputs


def _poisoned_outputs(monkeypatch):
    """Makes the double backward's outputs NaN-filled (kgen writes every row a sequence owns):
    shaped as the library allocates them."""
    def outputs(q, k, v, o):
        return tuple(torch.full_like(t, math.nan) for t in _kernels_outputs(q, k, v, o))
    monkeypatch.setattr(_kernels, "_double_backward_outputs", outputs)


def _check_double(got, ref, lq, lk, dtype, what, poisoned=True):
    """Each sequence's rows of q̄, k̄, v̄, dŌ against the float64 reference: the owned rows as a
    whole and each sequence of at least 8 queries and keys under §5.2's rule with the row rule; a
    shorter one elementwise against the tensor's scale (its norm is a few elements' noise); a
    sequence with no queries or no keys gets zeros; the padding rows keep their poison."""
    bound = SECOND_BOUND[dtype]
    cu_q, cu_k = [0], [0]
    for nq, nk in zip(lq, lk):
        cu_q.append(cu_q[-1] + nq), cu_k.append(cu_k[-1] + nk)
    for name, a, e, cu, lengths in (("q_bar", got[0], ref[0], cu_q, lq), ("k_bar", got[1], ref[1], cu_k, lk),
                                    ("v_bar", got[2], ref[2], cu_k, lk), ("do_bar", got[3], ref[3], cu_q, lq)):
        assert a.shape == e.shape, f"{what}: {name} shape {tuple(a.shape)}"
        owned = cu[-1]
        check_gradient(name, a[:owned], e[:owned], bound, True, what)
        scale = float(e[:owned].abs().max())
        for i, n in enumerate(lengths):
            rows_a, rows_e = a[cu[i]:cu[i] + n].double(), e[cu[i]:cu[i] + n]
            label = f"{what}: {name} sequence {i} ({lq[i]} queries, {lk[i]} keys)"
            if n == 0:
                continue
            if min(lq[i], lk[i]) == 0:
                assert (rows_a == 0).all(), f"{label}: must be zero"
            elif min(lq[i], lk[i]) >= 8:
                check_gradient(f"{name} sequence {i}", rows_a, rows_e, bound, True, label)
            else:
                assert torch.isfinite(rows_a).all(), f"{label}: NaN or Inf"
                err = float((rows_a - rows_e).abs().max())
                assert err <= bound * scale, f"{label}: max error {err:.2e} above {bound * scale:.2e}"
        if poisoned:
            assert torch.isnan(a[owned:]).all(), f"{what}: {name}'s rows past the last sequence were written"


@pytest.mark.parametrize("name", DOUBLE_CASES)
def test_double_backward_matches_each_sequence(name, monkeypatch):
    """q̄, k̄, v̄ and dŌ of an outer loss Σ⟨gq, dq⟩ + ⟨gk, dk⟩ + ⟨gv, dv⟩ through
    kgen.torch.varlen_attention (create_graph=True, then a second grad; the default family: wg: on
    sm_90a, fa2 on sm_80, simt for fp32 and odd head dims) against float64 autograd twice."""
    _poisoned_outputs(monkeypatch)
    case = DOUBLE_CASES[name]
    lq, lk, inputs, cotangents, sinks = _double_inputs(case, 31)
    cu_q, cu_k = _cu(lq), _cu(lk)
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    o = kgen.torch.varlen_attention(*leaves[:3], cu_q, cu_k, max(lq), max(lk), causal=case["causal"],
                                    **_keywords(case, sinks))
    first = torch.autograd.grad(o, leaves[:3], leaves[3], create_graph=True)  # o and d_o: like q, padding too
    got = torch.autograd.grad(first, leaves, cotangents)
    torch.cuda.synchronize()
    ref = _double_reference(case, lq, lk, inputs, cotangents, sinks)
    _check_double(got, ref, lq, lk, case["dtype"], name)


def _configs(case):
    """(family, config) of each family the case's dtype may run: the default, fa2 by name (also
    on sm_90a, where the default is wg:) and simt."""
    d = case["d"]
    simt = f"simt:w4:dmax{64 if d <= 64 else 128 if d <= 128 else 256}"
    out = [("default", None), ("simt", simt)]
    if case["dtype"] != torch.float32 and d % 8 == 0:
        out.append(("fa2", FA2_CONFIGS))
    return out


# The fa2 forms tried in order: the first the head dim admits runs (d = 128 takes 16-key tiles).
FA2_CONFIGS = ("fa2:bm64:bn32:w4", "fa2:bm64:bn16:w4", "fa2:bm32:bn16:w2")


@pytest.mark.parametrize("name,family,config", [(n, f, c) for n, case in DOUBLE_CASES.items()
                                                for f, c in _configs(case)], ids=lambda x: x[0] if isinstance(x, tuple) else x)
def test_double_backward_operator_on_every_family(name, family, config, monkeypatch):
    """torch.ops.kgen.varlen_attention_double_backward under each family's config against float64,
    with absent cotangents on the default."""
    from kgen._lib import KgenError
    _poisoned_outputs(monkeypatch)
    case = DOUBLE_CASES[name]
    lq, lk, (q, k, v, d_o), cotangents, sinks = _double_inputs(case, 47)
    cu_q, cu_k = _cu(lq), _cu(lk)
    variant = kgen.torch._variant(**_keywords(case, sinks))
    scale = 1.0 / math.sqrt(case["d"])
    o, lse = kgen.torch._varlen_forward(q, k, v, cu_q, cu_k, max(lq), max(lk), case["causal"], scale, variant, True)
    for form in (config if isinstance(config, tuple) else (config,)):
        try:
            got = kgen.torch._run(kgen.torch._VARLEN_DOUBLE_BACKWARD, q, k, v, o, lse, d_o, *cotangents, cu_q, cu_k,
                                  max(lq), max(lk), scale, case["causal"], False, form, *variant)
            break
        except KgenError as e:
            if form is None or "invalid here" not in str(e):
                raise
    else:
        pytest.fail(f"none of {config} serves d = {case['d']}")
    torch.cuda.synchronize()
    ref = _double_reference(case, lq, lk, (q, k, v, d_o), cotangents, sinks)
    _check_double(got, ref, lq, lk, case["dtype"], f"{name} [{family}]")
    if family == "default":  # gk alone: gq and gv absent (zero)
        only_gk = (None, cotangents[1], None)
        got = kgen.torch._run(kgen.torch._VARLEN_DOUBLE_BACKWARD, q, k, v, o, lse, d_o, *only_gk, cu_q, cu_k,
                              max(lq), max(lk), scale, case["causal"], False, None, *variant)
        torch.cuda.synchronize()
        zeros = (torch.zeros_like(q), cotangents[1], torch.zeros_like(v))
        ref = _double_reference(case, lq, lk, (q, k, v, d_o), zeros, sinks)
        _check_double(got, ref, lq, lk, case["dtype"], f"{name} [gk only]")


def test_flash_attn_varlen_func_double_backward():
    """FlashAttention's drop-in differentiates twice through kgen's packed double backward."""
    case = DOUBLE_CASES["cross_lengths_causal_bf16_d64_gqa"]
    lq, lk, inputs, cotangents, _ = _double_inputs(case, 59)
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    o = flash_attn_varlen_func(*leaves[:3], _cu(lq), _cu(lk), max(lq), max(lk), causal=True)
    first = torch.autograd.grad(o, leaves[:3], leaves[3], create_graph=True)
    got = torch.autograd.grad(first, leaves, cotangents)
    ref = _double_reference(case, lq, lk, inputs, cotangents, None)
    _check_double(got, ref, lq, lk, case["dtype"], "flash_attn_varlen_func", poisoned=False)


def test_double_backward_errors_name_the_argument():
    q = torch.randn(64, 2, 64, device=DEVICE).bfloat16()
    cu = torch.tensor([0, 32, 64], dtype=torch.int32, device=DEVICE)
    o, lse = kgen.torch._varlen_forward(q, q, q, cu, cu, 32, 32, True, None, kgen.torch._variant(), True)
    with pytest.raises(kgen.torch.KgenError, match="^gk:"):
        kgen.torch._run(kgen.torch._VARLEN_DOUBLE_BACKWARD, q, q, q, o, lse, q, None, q[:32], None, cu, cu, 32, 32,
                        None, True, False, None, *kgen.torch._variant())
    with pytest.raises(kgen.torch.KgenError, match="^config:"):
        kgen.torch._run(kgen.torch._VARLEN_DOUBLE_BACKWARD, q, q, q, o, lse, q, q, None, None, cu, cu, 32, 32,
                        None, True, False, "fa2:bm48:bn32:w3", *kgen.torch._variant())
    # Sinks that learn: the double backward treats them as constants and says so.
    sinks = torch.zeros(2, device=DEVICE, requires_grad=True)
    leaf = q.detach().clone().requires_grad_()
    o = kgen.torch.varlen_attention(leaf, leaf, leaf, cu, cu, 32, 32, causal=True, sinks=sinks)
    dq, = torch.autograd.grad(o.float().sum(), leaf, create_graph=True)
    with pytest.raises(NotImplementedError, match="sinks"):
        torch.autograd.grad(dq.float().square().sum(), leaf)
