"""kgen.flash_attn_interface without a GPU: each FlashAttention function against a float64
reference written here from FlashAttention 2's semantics (fa_reference: its docstrings' formulas
and its kernels' window handling), with kgen.torch replaced by a float64 stand-in of kgen's
documented semantics (presets composed as docs/attention.md §8 says, score_mod and mask_mod
evaluated by test_flex_trace's evaluator of the expression language). So each test checks the
mapping (layouts, window, softcap, ALiBi and scale, return tuples, KV-cache appends and the
lengths mask), not kgen's kernels. Then the library's parser on the expressions built here, the
calls that reach the library through the real kgen.torch (test_variant_args' recorder), the
NotImplementedError cases and FlashAttention's signatures."""
import inspect
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kgen.testing  # noqa: E402
import kgen.torch  # noqa: E402
from kgen import flash_attn_interface as fa  # noqa: E402
from test_flex_trace import Evaluator  # noqa: E402
from test_variant_args import calls, library_variant, passes_validation, spec  # noqa: E402,F401

B, H, H_KV, D = 2, 4, 2, 8
SHAPES = [(5, 9), (9, 5), (7, 7), (11, 3)]  # (n_q, n_k): n_q > 2·n_k reaches the window's edge rules


def _randn(*shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _slopes(batched=False):
    slopes = torch.tensor([2.0 ** (-2.0 * (i + 1) / H) for i in range(H)], dtype=torch.float32)
    return torch.stack([slopes, 0.5 * slopes]) if batched else slopes


# --- FlashAttention 2's semantics -------------------------------------------------------------------------

def fa_window(window_size, causal, seqlen_k):
    """(left, right) bounds as FlashAttention 2's kernels use them (mha_fwd, then set_params),
    or None without a window: a side >= seqlen_k is open, causal sets right = 0, and an open side
    beside a bounded one becomes seqlen_k."""
    left, right = window_size
    left = -1 if left >= seqlen_k else left
    right = -1 if right >= seqlen_k else right
    if causal:
        right = 0
    if left < 0 and right >= 0:
        left = seqlen_k
    if left >= 0 and right < 0:
        right = seqlen_k
    return None if left < 0 else (left, right)


def fa_reference(q, k, v, *, causal=False, scale=None, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                 key_lens=None, key_start=None, seqlen_k=None):
    """(out (b, n_q, h, d), lse (b, h, n_q)) in float64 of FlashAttention 2 on q (b, n_q, h, d), k and
    v (b, n_k, h_kv, d): s = scale·q·k; softcap·tanh(s/softcap); minus slope·|i + L - n_q - j|;
    causal and window bottom-right against each sequence's key count L (key_lens[b], else n_k;
    keys below key_start[b] hidden, as cache_leftpad); rows that see nothing give 0 and -inf.
    seqlen_k is the length the window is normalised against (default n_k). Differentiable."""
    b, n_q, h, d = q.shape
    n_k, h_kv = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    q64 = q.double().transpose(1, 2)
    k64 = k.double().transpose(1, 2).repeat_interleave(h // h_kv, dim=1)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(n_q, device=q.device)[None, None, :, None]
    j = torch.arange(n_k, device=q.device)[None, None, None, :]
    lens = torch.full((b,), n_k, device=q.device) if key_lens is None else key_lens.long()
    row = i + lens[:, None, None, None] - n_q  # the key position query i sits at
    if alibi_slopes is not None:
        slope = alibi_slopes.double()
        slope = slope[:, :, None, None] if slope.dim() == 2 else slope[None, :, None, None]
        s = s - slope * (row - j).abs()
    visible = j < lens[:, None, None, None]
    if key_start is not None:
        visible = visible & (j >= key_start.long()[:, None, None, None])
    window = fa_window(window_size, causal, n_k if seqlen_k is None else seqlen_k)
    if window is not None:
        visible = visible & (j >= row - window[0]) & (j <= row + window[1])
    return _softmax(s.masked_fill(~visible, -math.inf), v)


# --- kgen's documented semantics, as a float64 stand-in for kgen.torch -------------------------------------

def kgen_scores(q, k, *, causal, scale, window=None, softcap=0, alibi_slopes=None, score_mod=None, mask_mod=None,
                scalars=None, tensors=None, first_batch=0):
    """kgen's modified, masked scores (b, h, n_q, n_k) of bnhd q, k (docs/attention.md §8: the
    user's f, then alibi, then softcap; the masks and-ed); the expressions' b counts from
    first_batch."""
    b, n_q, h, d = q.shape
    n_k = k.shape[1]
    q64 = q.double().transpose(1, 2)
    k64 = k.double().transpose(1, 2).repeat_interleave(h // k.shape[2], dim=1)
    s = (q64 @ k64.transpose(-1, -2)) * (d ** -0.5 if scale is None else scale)
    bi, hi = torch.arange(first_batch, first_batch + b)[:, None, None, None], torch.arange(h)[None, :, None, None]
    qi, ki = torch.arange(n_q)[None, None, :, None], torch.arange(n_k)[None, None, None, :]
    env = {"score": s, "b": bi, "h": hi, "q": qi, "k": ki, "n_q": torch.tensor(n_q), "n_k": torch.tensor(n_k)}
    env.update({name: torch.tensor(x) for name, x in (scalars or {}).items()})
    env.update(tensors or {})
    diag = n_k - n_q
    if score_mod is not None:
        s = Evaluator(score_mod, env).run()
    if alibi_slopes is not None:
        s = s - alibi_slopes.double()[hi] * (qi + diag - ki).abs()
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    visible = torch.ones(s.shape, dtype=torch.bool)
    if causal:
        visible = visible & (ki <= qi + diag)
    if window is not None:
        left, right = window
        visible = visible & ((ki >= qi + diag - left) | (left < 0)) & ((ki <= qi + diag + right) | (right < 0))
    if mask_mod is not None:
        visible = visible & Evaluator(mask_mod, env).run()
    return s.masked_fill(~visible, -math.inf)


def _softmax(s, v):
    """(o bnhd, lse (b, h, n_q)) of masked scores s (b, h, n_q, n_k) and bnhd v."""
    v64 = v.double().transpose(1, 2).repeat_interleave(s.shape[1] // v.shape[2], dim=1)
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    total = p.sum(-1, keepdim=True)
    o = (p @ v64) / torch.where(total == 0, torch.ones_like(total), total)
    return o.transpose(1, 2), (m + torch.log(total)).squeeze(-1)


def kgen_backward(q, k, v, o, lse, d_o, *, causal, scale, **variant):
    """(dq, dk, dv) as kgen's backward computes them from the given o and lse: dS = P∘(dP − D)
    with P = exp(s − lse) (0 on a row whose lse is -inf) and D = rowsum(dO∘O), through autograd of
    a surrogate with those terms."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = kgen_scores(q, k, causal=causal, scale=scale, **variant)
    lse = lse.double()
    p = torch.exp(s - torch.where(torch.isneginf(lse), math.inf, lse)[..., None])
    d_o64 = d_o.double().transpose(1, 2)
    delta = (d_o.double() * o.double()).sum(-1).transpose(1, 2)
    v64 = v.transpose(1, 2).repeat_interleave(s.shape[1] // v.shape[2], dim=1)
    surrogate = (d_o64 * (p @ v64)).sum() - (delta * p.sum(-1)).sum()
    return torch.autograd.grad(surrogate, (q, k, v))


@pytest.fixture
def kgen_stand_in(monkeypatch):
    """kgen.torch's attention functions (and the interface's variant backward) replaced by the
    float64 stand-in; returns the list of (function, positional tensors, keywords) of each call."""
    recorded = []

    def attention(q, k, v, *, causal=False, scale=None, layout="bhnd", deterministic=False, **variant):
        assert layout == "bnhd"
        recorded.append(("attention", (q, k, v), dict(causal=causal, scale=scale, deterministic=deterministic,
                                                      **variant)))
        return _softmax(kgen_scores(q, k, causal=causal, scale=scale, **variant), v)[0]

    def attention_forward(q, k, v, *, causal=False, scale=None, layout="bhnd", out=None, lse=None,
                          return_lse=False, **variant):
        assert layout == "bnhd" and out is None and lse is None
        recorded.append(("attention_forward", (q, k, v), dict(causal=causal, scale=scale, **variant)))
        o, l = _softmax(kgen_scores(q, k, causal=causal, scale=scale, **variant), v)
        return (o.detach(), l.detach()) if return_lse else o.detach()  # lse in float64: exact references

    def attention_backward(q, k, v, o, lse, d_o, *, causal=False, scale=None, layout="bhnd", deterministic=False,
                           dq=None, dk=None, dv=None, config=None):
        assert layout == "bnhd" and config is None
        recorded.append(("attention_backward", (q, k, v, o, lse, d_o), dict(causal=causal, scale=scale)))
        for given, grad in zip((dq, dk, dv), kgen_backward(q, k, v, o, lse, d_o, causal=causal, scale=scale)):
            given.copy_(grad)
        return dq, dk, dv

    def variant_backward(q, k, v, out, lse, dout, scale, causal, deterministic, variant):
        recorded.append(("variant_backward", (q, k, v, out, lse, dout), dict(causal=causal, scale=scale, **variant)))
        return kgen_backward(q, k, v, out, lse, dout, causal=causal, scale=scale, **variant)

    def paged_append(k, v, k_cache, v_cache, block_table, cache_seqlens, *, rotary_cos=None, rotary_sin=None,
                     rotary_interleaved=False, q=None, q_out=None, q_sequential=True, layout="bnhd"):
        assert layout == "bnhd"
        recorded.append(("paged_append", (k, v, k_cache, v_cache),
                         dict(block_table=block_table, cache_seqlens=cache_seqlens, rotary_interleaved=rotary_interleaved,
                              q_sequential=q_sequential)))
        rotated = kgen.testing.paged_append_reference(k, v, k_cache, v_cache, block_table, cache_seqlens,
                                                      rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                                      rotary_interleaved=rotary_interleaved, q=q,
                                                      q_sequential=q_sequential)
        if rotated is None:
            return None
        target = q if q_out is None else q_out
        target.copy_(rotated)
        return target

    for name, function in (("attention", attention), ("attention_forward", attention_forward),
                           ("attention_backward", attention_backward), ("paged_append", paged_append)):
        monkeypatch.setattr(kgen.torch, name, function)
    monkeypatch.setattr(fa, "_variant_backward", variant_backward)
    return recorded


def close(got, expected, what=""):
    torch.testing.assert_close(got.double(), expected.double(), rtol=1e-9, atol=1e-9, msg=lambda m: f"{what}: {m}")


def close_lse(got, expected, what=""):
    """lse of the stand-in (float64); -inf rows exactly."""
    assert got.shape == expected.shape, what
    assert torch.equal(torch.isneginf(got), torch.isneginf(expected)), what
    finite = torch.isfinite(expected)
    close(got[finite], expected[finite], what)


def qkv(n_q, n_k, seed=0, dtype=torch.float64, requires_grad=False):
    q = _randn(B, n_q, H, D, seed=seed, dtype=dtype)
    k = _randn(B, n_k, H_KV, D, seed=seed + 1, dtype=dtype)
    v = _randn(B, n_k, H_KV, D, seed=seed + 2, dtype=dtype)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


# (FlashAttention keywords, the kgen keywords expected beyond causal/scale: "preset" names or "score_mod")
VARIANTS = {
    "plain": dict(),
    "causal": dict(causal=True),
    "scale": dict(softmax_scale=0.3),
    "window_both": dict(window_size=(2, 1)),
    "window_left": dict(window_size=(3, -1)),
    "window_right": dict(window_size=(-1, 1)),
    "window_wide": dict(window_size=(20, 20)),
    "window_right_wide": dict(window_size=(-1, 20)),
    "causal_window": dict(causal=True, window_size=(2, 5)),
    "causal_window_open": dict(causal=True, window_size=(-1, 3)),
    "softcap": dict(softcap=2.0),
    "alibi": dict(alibi_slopes=_slopes()),
    "alibi_batched": dict(alibi_slopes=_slopes(batched=True)),
    "alibi_causal": dict(alibi_slopes=_slopes(), causal=True),
    "softcap_alibi": dict(softcap=1.5, alibi_slopes=_slopes()),
    "softcap_alibi_batched_window": dict(softcap=1.5, alibi_slopes=_slopes(batched=True), window_size=(3, 2),
                                         causal=True),
}


def _fa_keywords(keywords):
    return dict(causal=keywords.get("causal", False), scale=keywords.get("softmax_scale"),
                window_size=keywords.get("window_size", (-1, -1)), softcap=keywords.get("softcap", 0.0),
                alibi_slopes=keywords.get("alibi_slopes"))


@pytest.mark.parametrize("n_q,n_k", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
@pytest.mark.parametrize("name", VARIANTS)
def test_flash_attn_func(kgen_stand_in, name, n_q, n_k):
    keywords = VARIANTS[name]
    q, k, v = qkv(n_q, n_k, seed=n_q)
    expected, expected_lse = fa_reference(q, k, v, **_fa_keywords(keywords))
    out = fa.flash_attn_func(q, k, v, **keywords)
    close(out, expected, name)
    out, lse, probs = fa.flash_attn_func(q, k, v, return_attn_probs=True, **keywords)
    close(out, expected, name)
    close_lse(lse, expected_lse, name)
    assert probs is None and lse.shape == (B, H, n_q)
    function, tensors, passed = kgen_stand_in[-1]
    assert function == "attention_forward" and all(a is b for a, b in zip(tensors, (q, k, v)))  # no copies


def test_presets_where_they_agree(kgen_stand_in):
    """Per-head slopes alone and softcap alone are kgen's presets; together, or with (b, h) slopes,
    one score_mod (FlashAttention caps before the bias, kgen's presets after it)."""
    q, k, v = qkv(5, 9)
    slopes = _slopes()

    def passed(**keywords):
        fa.flash_attn_func(q, k, v, **keywords)
        return {key: value for key, value in kgen_stand_in[-1][2].items() if key not in ("scale", "deterministic")}

    assert passed() == dict(causal=False)
    assert passed(causal=True, window_size=(-1, 0)) == dict(causal=True)  # causal alone: the plain kernels
    assert passed(causal=True, window_size=(4, 0)) == dict(causal=True, window=(4, -1))
    assert passed(window_size=(4, -1)) == dict(causal=False, window=(4, 9))
    assert passed(window_size=(9, 8)) == dict(causal=False, window=(-1, 8))
    assert passed(softcap=30.0) == dict(causal=False, softcap=30.0)
    assert passed(softcap=0.0, alibi_slopes=slopes)["alibi_slopes"] is not None
    mod = passed(softcap=30.0, alibi_slopes=slopes)
    assert mod["score_mod"] == "cap*tanh(score/cap)-slope[h]*float(abs(q+(n_k-n_q)-k))"
    assert mod["scalars"] == {"cap": 30.0} and torch.equal(mod["tensors"]["slope"], slopes)
    assert "alibi_slopes" not in mod and "softcap" not in mod
    batched = passed(alibi_slopes=_slopes(batched=True))
    assert batched["score_mod"] == "score-slope[b][h]*float(abs(q+(n_k-n_q)-k))" and batched["scalars"] == {}


def test_window_mapping():
    """kgen's window beside causal for FlashAttention's window_size over n_k = 10 keys."""
    cases = {((-1, -1), False): None, ((-1, -1), True): None, ((3, 0), True): (3, -1), ((3, 2), True): (3, -1),
             ((-1, 4), True): None, ((3, 2), False): (3, 2), ((3, -1), False): (3, 10), ((-1, 2), False): (-1, 2),
             ((10, 2), False): (-1, 2), ((3, 10), False): (3, 10), ((-1, 10), False): None,
             ((12, 12), False): None, ((0, 0), False): (0, 0)}
    for (window_size, causal), expected in cases.items():
        assert fa._window(window_size, causal, 10) == expected, (window_size, causal)


@pytest.mark.parametrize("name", ["plain", "causal", "window_both", "softcap_alibi", "alibi_batched",
                                  "causal_window"])
def test_gradients(kgen_stand_in, name):
    """Gradients through flash_attn_func and its packed forms (views of qkv and kv), equal to
    float64 autograd through FlashAttention's semantics; alibi slopes get none."""
    keywords = VARIANTS[name]
    n_q = n_k = 7
    q, k, v = qkv(n_q, n_k, seed=3, requires_grad=True)
    r = _randn(B, n_q, H, D, seed=9)
    expected = torch.autograd.grad((fa_reference(q, k, v, **_fa_keywords(keywords))[0] * r).sum(), (q, k, v))
    got = torch.autograd.grad((fa.flash_attn_func(q, k, v, **keywords) * r).sum(), (q, k, v))
    for a, e, grad in zip(got, expected, ("dq", "dk", "dv")):
        close(a, e, f"{name} {grad}")
    assert kgen_stand_in[-1][0] == "attention"
    if name != "plain":
        return
    qkv_packed = torch.stack([q, *(t.repeat_interleave(2, dim=2) for t in (k, v))], dim=2).detach().requires_grad_()
    out = fa.flash_attn_qkvpacked_func(qkv_packed, **keywords)
    _, (pq, pk, pv), _ = kgen_stand_in[-1]
    assert all(t.untyped_storage().data_ptr() == qkv_packed.untyped_storage().data_ptr() for t in (pq, pk, pv))
    (dqkv,) = torch.autograd.grad((out * r).sum(), qkv_packed)
    close(dqkv[:, :, 0], expected[0], "dq of qkv")
    kv = torch.stack([k, v], dim=2).detach().requires_grad_()
    out = fa.flash_attn_kvpacked_func(q, kv, **keywords)
    _, (_, pk, pv), _ = kgen_stand_in[-1]
    assert pk.untyped_storage().data_ptr() == kv.untyped_storage().data_ptr() and pk.shape == k.shape
    dq, dkv = torch.autograd.grad((out * r).sum(), (q, kv))
    close(dq, expected[0], "dq with kv")
    close(dkv[:, :, 0], expected[1], "dk of kv")
    close(dkv[:, :, 1], expected[2], "dv of kv")


def test_return_attn_probs_with_gradients(kgen_stand_in):
    q, k, v = qkv(6, 8, requires_grad=True)
    out, lse, probs = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert out.requires_grad and not lse.requires_grad and probs is None
    expected, expected_lse = fa_reference(q, k, v, causal=True)
    close(out, expected)
    close_lse(lse, expected_lse)


# --- _flash_attn_forward / _flash_attn_backward ------------------------------------------------------------

def _pair_arguments(keywords):
    w = keywords.get("window_size", (-1, -1))
    return (keywords.get("softmax_scale"), keywords.get("causal", False), w[0], w[1], keywords.get("softcap", 0.0),
            keywords.get("alibi_slopes"))


@pytest.mark.parametrize("name", ["plain", "causal", "scale", "window_both", "softcap", "alibi_causal",
                                  "softcap_alibi_batched_window"])
def test_forward_backward_pair(kgen_stand_in, name):
    """_flash_attn_forward's 4-tuple; _flash_attn_backward writes the given dq, dk, dv (and
    allocates missing ones), returns softmax_d; a variant takes the variant backward."""
    keywords = VARIANTS[name]
    n_q, n_k = 6, 9
    q, k, v = qkv(n_q, n_k, seed=5)
    scale, causal, left, right, softcap, slopes = _pair_arguments(keywords)
    out, lse, s_dmask, rng_state = fa._flash_attn_forward(q, k, v, 0.0, scale, causal, left, right, softcap, slopes,
                                                          False)
    expected, expected_lse = fa_reference(q, k, v, **_fa_keywords(keywords))
    close(out, expected, name)
    close_lse(lse, expected_lse, name)
    assert s_dmask is None and rng_state.shape == (2,) and rng_state.dtype == torch.int64
    dout = _randn(B, n_q, H, D, seed=8)
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    grads = torch.autograd.grad((fa_reference(*inputs, **_fa_keywords(keywords))[0] * dout).sum(), inputs)
    dq, dk = (torch.full_like(t, math.nan) for t in (q, k))
    softmax_d = fa._flash_attn_backward(dout, q, k, v, out, lse, dq, dk, None, 0.0, scale, causal, left, right,
                                        softcap, slopes, False, rng_state)
    assert kgen_stand_in[-1][0] == ("attention_backward" if name in ("plain", "causal", "scale") else
                                    "variant_backward")
    close(dq, grads[0], f"{name} dq")
    close(dk, grads[1], f"{name} dk")
    torch.testing.assert_close(softmax_d.double(), (dout * out).sum(-1).transpose(1, 2), rtol=1e-5, atol=1e-5)
    assert softmax_d.dtype == torch.float32 and softmax_d.shape == (B, H, n_q)


def test_ring_merge(kgen_stand_in):
    """Ring attention's use: forwards over two key blocks merged by their lse, then each block's
    backward with the merged out and lse; the sums are the gradients of the whole."""
    q, k, v = qkv(6, 10, seed=7)
    dout = _randn(B, 6, H, D, seed=11)
    blocks = [(k[:, :4], v[:, :4]), (k[:, 4:], v[:, 4:])]
    parts = [fa._flash_attn_forward(q, kb, vb, 0.0, None, False, -1, -1, 0.0, None, False)[:2] for kb, vb in blocks]
    lse = torch.logaddexp(parts[0][1], parts[1][1])
    out = sum(o * torch.exp(l - lse).transpose(1, 2)[..., None] for o, l in parts)
    dq = torch.zeros_like(q)
    dks, dvs = [], []
    for kb, vb in blocks:
        dq_block, dk, dv = torch.empty_like(q), torch.empty_like(kb), torch.empty_like(vb)
        fa._flash_attn_backward(dout, q, kb, vb, out, lse, dq_block, dk, dv, 0.0, None, False, -1, -1, 0.0, None,
                                False)
        dq += dq_block
        dks.append(dk)
        dvs.append(dv)
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = torch.autograd.grad((fa_reference(*inputs)[0] * dout).sum(), inputs)
    close(dq, expected[0], "dq")
    close(torch.cat(dks, 1), expected[1], "dk")
    close(torch.cat(dvs, 1), expected[2], "dv")


def test_variant_backward_reaches_the_library(calls):
    """The real path (kgen.torch and its operators, a recorder for the library): the window,
    softcap and score_mod reach kgen_attention_backward_variant, and its outputs land in the
    caller's buffers."""
    q, k, v = (t.bfloat16() for t in qkv(6, 9))
    out, lse = kgen.torch.attention_forward(q, k, v, layout="bnhd", return_lse=True)
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    fa._flash_attn_backward(out, q, k, v, out, lse, dq, dk, dv, 0.0, 0.5, True, 3, 0, 20.0, _slopes(), True)
    name, *tensors, c = calls[-1]
    assert name == "kgen_attention_backward_variant"
    assert tensors[0][0] == (B, H, 6, D)  # q's (b, h, n, d) view of the bnhd tensor
    assert (c["window_left"], c["window_right"], c["softcap"]) == (3, -1, 0.0)
    assert c["score_mod"] == b"cap*tanh(score/cap)-slope[h]*float(abs(q+(n_k-n_q)-k))"
    assert c["scalars"] == [(b"cap", 20.0, 0)] and [t[0] for t in c["tensors"]] == [b"slope"]
    assert all(bool((t == 0).all()) for t in (dq, dk, dv))  # the recorder's zeros, copied in
    fa.flash_attn_func(q, k, v, causal=True, window_size=(4, 0), softcap=30.0)
    c = calls[-1][-1]
    assert calls[-1][0] == "kgen_attention_forward_variant"
    assert (c["window_left"], c["window_right"], c["softcap"]) == (4, -1, 30.0)


# --- KV caches ------------------------------------------------------------------------------------------

N_CACHE = 12


def _cache(seed):
    return _randn(B + 1, N_CACHE, H_KV, D, seed=seed), _randn(B + 1, N_CACHE, H_KV, D, seed=seed + 1)


KVCACHE = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(causal=True, window_size=(3, 0)),
    "window_both": dict(window_size=(2, 1)),
    "window_left": dict(window_size=(3, -1)),
    "softcap_alibi": dict(softcap=1.5, alibi_slopes=_slopes(), causal=True),
    "alibi_batched": dict(alibi_slopes=_slopes(batched=True)),
    "alibi": dict(alibi_slopes=_slopes()),
}


@pytest.mark.parametrize("lengths", ["tensor", "int", "leftpad"])
@pytest.mark.parametrize("n_new", [0, 2])
@pytest.mark.parametrize("name", KVCACHE)
def test_kvcache(kgen_stand_in, name, n_new, lengths):
    """Appends k and v in place at cache_seqlens (nothing else changes), then attends to each
    sequence's valid keys, aligned to its own length, as FlashAttention does."""
    keywords = KVCACHE[name]
    n_q = 3
    q = _randn(B, n_q, H, D, seed=1)
    k_cache, v_cache = _cache(2)
    before = k_cache.clone(), v_cache.clone()
    seqlens = torch.tensor([4, 7], dtype=torch.int32) if lengths != "int" else 5
    leftpad = torch.tensor([1, 3], dtype=torch.int32) if lengths == "leftpad" else None
    k_new = _randn(B, n_new, H_KV, D, seed=4) if n_new else None
    v_new = _randn(B, n_new, H_KV, D, seed=5) if n_new else None
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens,
                                         cache_leftpad=leftpad, return_softmax_lse=True, **keywords)
    starts = seqlens.tolist() if lengths != "int" else [seqlens] * B
    for cache, old, new in ((k_cache, before[0], k_new), (v_cache, before[1], v_new)):
        expected = old.clone()
        for i, start in enumerate(starts):
            if n_new:
                expected[i, start:start + n_new] = new[i]
        assert torch.equal(cache, expected), "the append"
    lens = torch.tensor(starts) + n_new
    expected, expected_lse = fa_reference(q, k_cache[:B], v_cache[:B], key_lens=lens, key_start=leftpad,
                                          seqlen_k=N_CACHE, **_fa_keywords(keywords))
    close(out, expected, name)
    close_lse(lse, expected_lse, name)
    _, tensors, passed = kgen_stand_in[-1]
    if lengths == "int":  # one length: the plain kernels (or presets) on the valid prefix
        assert "mask_mod" not in passed and tensors[1].shape[1] == 5 + n_new
    else:
        assert passed["mask_mod"].startswith("k<lens[b]") and passed["causal"] is False
        assert passed["tensors"]["lens"].dtype == torch.int32


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("interleaved", [False, True])
def test_kvcache_rotary(kgen_stand_in, interleaved, causal):
    """With rotary tables the new keys are written rotated at cache_seqlens + i, and q attends
    rotated at cache_seqlens + i (causal) or cache_seqlens (not causal, not windowed), as
    FlashAttention does; q itself is left alone."""
    n_new = 2
    q = _randn(B, n_new, H, D, seed=1)
    q_before = q.clone()
    k_cache, v_cache = _cache(2)
    k_new, v_new = _randn(B, n_new, H_KV, D, seed=4), _randn(B, n_new, H_KV, D, seed=5)
    angles = torch.arange(N_CACHE, dtype=torch.float64)[:, None] * torch.tensor([1.0, 0.25], dtype=torch.float64)
    cos, sin = angles.cos(), angles.sin()  # rotary_dim 4 of D = 8
    seqlens = torch.tensor([4, 7], dtype=torch.int32)
    fa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                               cache_seqlens=seqlens, causal=causal, rotary_interleaved=interleaved)
    pos = seqlens.long()[:, None] + torch.arange(n_new)
    want_k = kgen.testing.rotary_reference(k_new, cos, sin, pos, interleaved=interleaved)
    for i, start in enumerate(seqlens.tolist()):
        close(k_cache[i, start:start + n_new], want_k[i], "rotated keys")
        close(v_cache[i, start:start + n_new], v_new[i], "values")
    assert torch.equal(q, q_before)
    q_pos = pos if causal else seqlens.long()[:, None].expand(B, n_new)
    attended = [tensors for function, tensors, _ in kgen_stand_in if function == "attention_forward"][-1][0]
    close(attended, kgen.testing.rotary_reference(q, cos, sin, q_pos, interleaved=interleaved), "rotated q")


def test_kvcache_whole_cache_and_empty_rows(kgen_stand_in):
    q = _randn(B, 2, H, D, seed=1)
    k_cache, v_cache = _cache(3)
    out = fa.flash_attn_with_kvcache(q, k_cache[:B], v_cache[:B], causal=True)
    close(out, fa_reference(q, k_cache[:B], v_cache[:B], causal=True)[0])
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor([0, 3], dtype=torch.int32),
                                         return_softmax_lse=True)
    assert bool((out[0] == 0).all()) and bool(torch.isneginf(lse[0]).all()) and bool(torch.isfinite(lse[1]).all())
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=0)
    assert bool((out == 0).all())


CACHE_EXPRESSIONS = [  # for test_variant_args' shapes: b = 2, 8 query heads
    dict(causal=True, window=(3, -1), softcap=30.0, alibi_slopes=torch.rand(8), leftpad=True),
    dict(causal=False, window=(2, 1), softcap=0.0, alibi_slopes=torch.rand(2, 8), leftpad=False),
    dict(causal=False, window=None, softcap=0.0, alibi_slopes=None, leftpad=False),
]


@pytest.mark.parametrize("case", range(len(CACHE_EXPRESSIONS)))
def test_library_parses_the_cache_expressions(kgen_library, case):
    """kgen's parser (the C API's validation, before any device work) accepts the expressions and
    declarations built for a KV cache with lengths, with the library's own test shapes."""
    c = dict(CACHE_EXPRESSIONS[case])
    lens = torch.tensor([100, 120], dtype=torch.int32)
    leftpad = torch.zeros(2, dtype=torch.int32) if c.pop("leftpad") else None
    keywords = fa._cache_variant(lens=lens, leftpad=leftpad, **c)
    fields = {"mask_mod": keywords["mask_mod"], "scalars": keywords["scalars"],
              "tensors": {name: spec(t.shape, str(t.dtype)[6:]) for name, t in keywords["tensors"].items()}}
    if "score_mod" in keywords:
        fields["score_mod"] = keywords["score_mod"]
    variant, keep = library_variant(fields)  # keep: the descriptors the variant points to
    passes_validation(variant)


# --- packed (varlen) batches --------------------------------------------------------------------------------

def _packed(lengths, heads, seed):
    return _randn(sum(lengths), heads, D, seed=seed)


def varlen_stand_in(recorded):
    """A float64 varlen_attention taking every variant keyword (as kgen.torch's): each sequence
    through the stand-in's semantics, b being the sequence's index."""
    def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False,
                         scale=None, return_lse=False, **variant):
        recorded.append(dict(causal=causal, scale=scale, return_lse=return_lse, max_seqlen_q=max_seqlen_q,
                             max_seqlen_k=max_seqlen_k, **variant))
        outs, lses = [], []
        for i in range(len(cu_seqlens_q) - 1):
            qs, ks, vs = (t[c[i]:c[i + 1]][None] for t, c in ((q, cu_seqlens_q), (k, cu_seqlens_k),
                                                                (v, cu_seqlens_k)))
            o, lse = _softmax(kgen_scores(qs, ks, causal=causal, scale=scale, first_batch=i, **variant), vs)
            outs.append(o[0])
            lses.append(lse[0])
        out, lse = torch.cat(outs), torch.cat(lses, dim=-1)
        return (out, lse) if return_lse else out
    return varlen_attention


@pytest.mark.parametrize("name", ["plain", "causal", "window_left", "causal_window", "softcap", "scale", "alibi",
                                  "alibi_batched", "softcap_alibi_batched_window"])
def test_varlen(monkeypatch, name):
    keywords = dict(VARIANTS[name])
    if name.startswith("alibi_batched") or name.endswith("batched_window"):
        keywords["alibi_slopes"] = torch.cat([keywords["alibi_slopes"], _slopes()[None] / 4])  # (3 sequences, h)
    recorded = []
    monkeypatch.setattr(kgen.torch, "varlen_attention", varlen_stand_in(recorded), raising=False)
    lengths_q, lengths_k = [3, 11, 1], [9, 4, 6]
    cu_q = torch.tensor([0, 3, 14, 15], dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 13, 19], dtype=torch.int32)
    q, k, v = _packed(lengths_q, H, 1), _packed(lengths_k, H_KV, 2), _packed(lengths_k, H_KV, 3)
    out, lse, probs = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 11, 9, return_attn_probs=True, **keywords)
    assert probs is None and out.shape == q.shape and lse.shape == (H, 15)
    fa_keywords = _fa_keywords(keywords)
    for i in range(3):
        rows, keys = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        if keywords.get("alibi_slopes") is not None and keywords["alibi_slopes"].dim() == 2:
            fa_keywords["alibi_slopes"] = keywords["alibi_slopes"][i:i + 1]  # sequence i's row
        expected, expected_lse = fa_reference(q[rows][None], k[keys][None], v[keys][None], seqlen_k=9, **fa_keywords)
        close(out[rows], expected[0], f"{name} sequence {i}")
        close_lse(lse[:, rows], expected_lse[0], f"{name} sequence {i}")
    assert recorded[-1]["max_seqlen_k"] == 9 and recorded[-1]["return_lse"] is True
    assert fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 11, 9, **keywords).shape == q.shape
    assert recorded[-1]["return_lse"] is False
    kv = torch.stack([k, v], dim=1)
    close(fa.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 11, 9, **keywords), out)


def test_varlen_needs_kgen_varlen(monkeypatch):
    monkeypatch.delattr(kgen.torch, "varlen_attention", raising=False)
    q = _packed([3], H, 1)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="^cu_seqlens_q: "):
        fa.flash_attn_varlen_func(q, q, q, cu, cu, 3, 3)
    def presets_only(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False, scale=None,
                     return_lse=False, window=None, softcap=0.0):
        return q

    monkeypatch.setattr(kgen.torch, "varlen_attention", presets_only, raising=False)
    fa.flash_attn_varlen_func(q, q, q, cu, cu, 3, 3, window_size=(1, 1), softcap=5.0)
    with pytest.raises(NotImplementedError, match="^alibi_slopes: "):
        fa.flash_attn_varlen_func(q, q, q, cu, cu, 3, 3, alibi_slopes=_slopes())
    with pytest.raises(NotImplementedError, match="^deterministic: "):
        fa.flash_attn_varlen_func(q, q, q, cu, cu, 3, 3, deterministic=True)
    with pytest.raises(NotImplementedError, match="^block_table: "):
        fa.flash_attn_varlen_func(q, q, q, cu, cu, 3, 3, block_table=cu)


# --- what is not served, the signatures, the import ----------------------------------------------------------

def test_unserved_arguments(kgen_stand_in):
    q, k, v = qkv(4, 4)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    for call in (lambda: fa.flash_attn_func(q, k, v, dropout_p=0.1),
                 lambda: fa.flash_attn_qkvpacked_func(torch.stack([q, q, q], 2), 0.1),
                 lambda: fa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 4, 4, dropout_p=0.1),
                 lambda: fa._flash_attn_forward(q, k, v, 0.1, None, False, -1, -1, 0.0, None, False),
                 lambda: fa._flash_attn_backward(q, q, k, v, q, None, None, None, None, 0.1, None, False, -1, -1,
                                                 0.0, None, False)):
        with pytest.raises(NotImplementedError, match=r"^dropout_p=0\.1: "):
            call()
    k_cache, v_cache = _cache(1)
    index = torch.zeros(B, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="^cache_batch_idx: "):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=index, cache_batch_idx=index)
    with pytest.raises(ValueError, match="^rotary_cos and rotary_sin: "):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=index, rotary_cos=q)
    with pytest.raises(ValueError, match="^rotary_cos: "):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=index, rotary_cos=q, rotary_sin=q)
    with pytest.raises(NotImplementedError, match="^cache_leftpad: "):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=index, cache_leftpad=index,
                                   block_table=index[:, None])
    with pytest.raises(ValueError, match="^cache_seqlens: "):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v)
    with pytest.raises(ValueError, match="^k and v: "):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, cache_seqlens=index)


FLASH_ATTN_SIGNATURES = {  # flash-attn 2.8's parameter lists
    "flash_attn_func": "q k v dropout_p softmax_scale causal window_size softcap alibi_slopes deterministic "
                       "return_attn_probs",
    "flash_attn_qkvpacked_func": "qkv dropout_p softmax_scale causal window_size softcap alibi_slopes deterministic "
                                 "return_attn_probs",
    "flash_attn_kvpacked_func": "q kv dropout_p softmax_scale causal window_size softcap alibi_slopes deterministic "
                                "return_attn_probs",
    "flash_attn_varlen_func": "q k v cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k dropout_p softmax_scale "
                              "causal window_size softcap alibi_slopes deterministic return_attn_probs block_table",
    "flash_attn_varlen_qkvpacked_func": "qkv cu_seqlens max_seqlen dropout_p softmax_scale causal window_size softcap "
                                        "alibi_slopes deterministic return_attn_probs",
    "flash_attn_varlen_kvpacked_func": "q kv cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k dropout_p "
                                       "softmax_scale causal window_size softcap alibi_slopes deterministic "
                                       "return_attn_probs",
    "flash_attn_with_kvcache": "q k_cache v_cache k v rotary_cos rotary_sin cache_seqlens cache_batch_idx "
                               "cache_leftpad block_table softmax_scale causal window_size softcap rotary_interleaved "
                               "alibi_slopes num_splits return_softmax_lse",
    "_flash_attn_forward": "q k v dropout_p softmax_scale causal window_size_left window_size_right softcap "
                           "alibi_slopes return_softmax",
    "_flash_attn_backward": "dout q k v out softmax_lse dq dk dv dropout_p softmax_scale causal window_size_left "
                            "window_size_right softcap alibi_slopes deterministic rng_state",
}


def test_signatures_are_flash_attentions():
    for name, parameters in FLASH_ATTN_SIGNATURES.items():
        assert list(inspect.signature(getattr(fa, name)).parameters) == parameters.split(), name
    assert sorted(fa.__all__) == sorted(FLASH_ATTN_SIGNATURES)


def test_import_kgen_does_not_import_the_interface():
    code = "import sys, kgen; assert 'kgen.flash_attn_interface' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(kgen.__file__).parents[1]))
