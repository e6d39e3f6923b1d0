"""GPU tests of kgen.flash_attn_interface: each FlashAttention function on kgen's kernels against
the float64 reference of FlashAttention 2's semantics in test_flash_attn_interface.py
(fa_reference), with the pass rule of test_variant_gpu.py (rel_l2, cosine, the row rule, lse per
element): flash_attn_func's out and lse and its gradients (and the packed forms'),
_flash_attn_forward / _flash_attn_backward (in place on poisoned buffers, and the ring merge of
two key blocks), flash_attn_with_kvcache's append and attention over per-sequence lengths, and
flash_attn_varlen_func where kgen.torch has varlen_attention. bf16 and fp16, odd sizes, GQA 4,
causal with n_q != n_k (rows that see nothing), windows, softcap and ALiBi. Skipped unless
PyTorch with CUDA and libkgen.so are available."""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from kgen import flash_attn_interface as fa  # noqa: E402
from kgen.testing import REL_L2_BOUND  # noqa: E402
from test_flash_attn_interface import fa_reference  # noqa: E402
from test_variant_gpu import check, check_gradient  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

DEVICE = "cuda"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
BATCH, HEADS, HEADS_KV = 2, 8, 2


def randn(shape, dtype, seed):
    return torch.randn(shape, generator=torch.Generator(device=DEVICE).manual_seed(seed), device=DEVICE).to(dtype)


def slopes(batch=None):
    """ALiBi's slopes for HEADS heads, fp32 (HEADS,), or (batch, HEADS) scaled per row."""
    s = torch.tensor([2.0 ** (-8.0 * (i + 1) / HEADS) for i in range(HEADS)], device=DEVICE)
    return s if batch is None else torch.stack([s / (i + 1) for i in range(batch)])


def qkv(n_q, n_k, d, dtype, seed, heads_kv=HEADS_KV, requires_grad=False):
    q = randn((BATCH, n_q, HEADS, d), dtype, seed)
    k = randn((BATCH, n_k, heads_kv, d), dtype, seed + 1)
    v = randn((BATCH, n_k, heads_kv, d), dtype, seed + 2)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


# FlashAttention keywords by name; softcap 2 is small enough that capping before or after the ALiBi
# bias gives different scores
VARIANTS = {
    "plain": dict(),
    "causal": dict(causal=True),
    "scale": dict(softmax_scale=0.2, causal=True),
    "causal_window": dict(causal=True, window_size=(64, 0)),
    "window_both": dict(window_size=(32, 16)),
    "window_left": dict(window_size=(48, -1)),
    "softcap": dict(softcap=2.0, causal=True),
    "alibi": dict(alibi_slopes=slopes()),
    "alibi_causal": dict(alibi_slopes=slopes(), causal=True),
    "alibi_batched": dict(alibi_slopes=slopes(BATCH), causal=True),
    "softcap_alibi": dict(softcap=2.0, alibi_slopes=slopes()),
}
SHAPES = [(1, 257), (100, 300), (257, 257), (300, 100)]  # (n_q, n_k)


def reference_keywords(keywords):
    return dict(causal=keywords.get("causal", False), scale=keywords.get("softmax_scale"),
                window_size=keywords.get("window_size", (-1, -1)), softcap=keywords.get("softcap", 0.0),
                alibi_slopes=keywords.get("alibi_slopes"))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", VARIANTS)
def test_flash_attn_func_forward(name, dtype):
    """out and softmax_lse of flash_attn_func(return_attn_probs=True), every shape, head dims 64
    and 80 (alternating), against the reference."""
    keywords = VARIANTS[name]
    for i, (n_q, n_k) in enumerate(SHAPES):
        d = (64, 80)[i % 2]
        q, k, v = qkv(n_q, n_k, d, dtype, seed=n_q + d)
        out, lse, probs = fa.flash_attn_func(q, k, v, return_attn_probs=True, **keywords)
        torch.cuda.synchronize()
        assert probs is None and out.shape == q.shape and lse.shape == (BATCH, HEADS, n_q)
        o_ref, lse_ref = fa_reference(q, k, v, **reference_keywords(keywords))
        check(out, lse, o_ref, lse_ref, dtype, f"{name} {dtype} d={d} {n_q}x{n_k}")
        out = fa.flash_attn_func(q, k, v, **keywords)  # kgen.torch.attention's path
        check(out, lse, o_ref, lse_ref, dtype, f"{name} {dtype} d={d} {n_q}x{n_k}, out alone")


def reference_gradients(q, k, v, d_o, keywords):
    inputs = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o, _ = fa_reference(*inputs, **reference_keywords(keywords))
    return torch.autograd.grad((o * d_o.double()).sum(), inputs)


GRADIENT_CASES = [("plain", (100, 300), 64), ("causal", (300, 100), 128), ("causal_window", (257, 257), 64),
                  ("window_both", (100, 300), 64), ("softcap_alibi", (257, 257), 64), ("alibi_causal", (100, 300), 80),
                  ("alibi_batched", (257, 257), 64)]


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name,shape,d", GRADIENT_CASES, ids=[f"{c[0]}-{c[1][0]}x{c[1][1]}" for c in GRADIENT_CASES])
def test_flash_attn_func_gradients(name, shape, d, dtype):
    """dq, dk, dv through flash_attn_func (GQA: dk and dv sum over each group) against float64
    autograd through the reference; alibi_slopes get no gradient."""
    keywords = dict(VARIANTS[name])
    n_q, n_k = shape
    q, k, v = qkv(n_q, n_k, d, dtype, seed=7 * n_q + d, requires_grad=True)
    if "alibi_slopes" in keywords:
        keywords["alibi_slopes"] = keywords["alibi_slopes"].clone().requires_grad_()
    d_o = randn(q.shape, dtype, seed=3)
    out = fa.flash_attn_func(q, k, v, deterministic=name == "causal", **keywords)
    got = torch.autograd.grad((out.float() * d_o.float()).sum(), (q, k, v))
    torch.cuda.synchronize()
    what = f"{name} {dtype} d={d} {n_q}x{n_k}"
    for grad, a, e in zip(("dq", "dk", "dv"), got, reference_gradients(q, k, v, d_o, keywords)):
        check_gradient(grad, a, e, REL_L2_BOUND[dtype], True, what)
    if "alibi_slopes" in keywords:
        assert keywords["alibi_slopes"].grad is None


def test_packed_forms():
    """flash_attn_qkvpacked_func and flash_attn_kvpacked_func: views of the packed tensors, the
    gradient lands in the packed tensor."""
    dtype, n, d = torch.bfloat16, 257, 64
    qkv_packed = randn((BATCH, n, 3, HEADS, d), dtype, 1).requires_grad_()
    d_o = randn((BATCH, n, HEADS, d), dtype, 2)
    out = fa.flash_attn_qkvpacked_func(qkv_packed, causal=True)
    (dqkv,) = torch.autograd.grad((out.float() * d_o.float()).sum(), qkv_packed)
    q, k, v = qkv_packed.detach().unbind(2)
    keywords = dict(causal=True)
    o_ref, lse_ref = fa_reference(q, k, v, causal=True)
    _, lse = kgen.torch.attention_forward(q, k, v, causal=True, layout="bnhd", return_lse=True)
    check(out.detach(), lse, o_ref, lse_ref, dtype, "qkvpacked")
    for i, (grad, e) in enumerate(zip(("dq", "dk", "dv"), reference_gradients(q, k, v, d_o, keywords))):
        check_gradient(grad, dqkv[:, :, i], e, REL_L2_BOUND[dtype], True, "qkvpacked")
    q, k, v = qkv(100, 300, d, dtype, seed=4)
    kv = torch.stack([k, v], dim=2).requires_grad_()
    out = fa.flash_attn_kvpacked_func(q, kv, window_size=(32, 16))
    (dkv,) = torch.autograd.grad((out.float() * d_o[:, :100].float()).sum(), kv)
    refs = reference_gradients(q, k, v, d_o[:, :100], dict(window_size=(32, 16)))
    check_gradient("dk", dkv[:, :, 0], refs[1], REL_L2_BOUND[dtype], True, "kvpacked")
    check_gradient("dv", dkv[:, :, 1], refs[2], REL_L2_BOUND[dtype], True, "kvpacked")


# --- _flash_attn_forward / _flash_attn_backward --------------------------------------------------------

PAIR_CASES = ["causal", "plain", "causal_window", "softcap_alibi", "alibi_batched"]


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", PAIR_CASES)
def test_forward_backward_pair(name, dtype):
    """The pair ring attention calls: out and softmax_lse of the forward; the backward writes
    NaN-poisoned dq, dk, dv in place (plain: kgen's backward; variants: the variant operator) and
    returns softmax_d = rowsum(dout·out)."""
    keywords = VARIANTS[name]
    n_q, n_k, d = 300, 100, 64  # causal: the first rows see nothing
    q, k, v = qkv(n_q, n_k, d, dtype, seed=11)
    w = keywords.get("window_size", (-1, -1))
    arguments = (keywords.get("softmax_scale"), keywords.get("causal", False), w[0], w[1],
                 keywords.get("softcap", 0.0), keywords.get("alibi_slopes"))
    out, lse, s_dmask, rng_state = fa._flash_attn_forward(q, k, v, 0.0, *arguments, False)
    o_ref, lse_ref = fa_reference(q, k, v, **reference_keywords(keywords))
    check(out, lse, o_ref, lse_ref, dtype, f"forward {name} {dtype}")
    assert s_dmask is None and rng_state.dtype == torch.int64
    d_o = randn(q.shape, dtype, 12)
    dq, dk, dv = (torch.full_like(t, math.nan) for t in (q, k, v))
    softmax_d = fa._flash_attn_backward(d_o, q, k, v, out, lse, dq, dk, dv, 0.0, *arguments, False, rng_state)
    torch.cuda.synchronize()
    what = f"backward {name} {dtype}"
    for grad, a, e in zip(("dq", "dk", "dv"), (dq, dk, dv), reference_gradients(q, k, v, d_o, keywords)):
        check_gradient(grad, a, e, REL_L2_BOUND[dtype], True, what)
    expected_d = (d_o.double() * out.double()).sum(-1).transpose(1, 2)
    torch.testing.assert_close(softmax_d.double(), expected_d, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_ring_merge(dtype):
    """Two key blocks: forwards merged by their lse, then each block's backward with the merged
    out and lse (as ring attention does); dq summed, dk and dv concatenated are the gradients of
    the whole."""
    n_q, n_k, d = 257, 300, 64
    q, k, v = qkv(n_q, n_k, d, dtype, seed=21)
    d_o = randn(q.shape, dtype, 22)
    blocks = [(k[:, :129], v[:, :129]), (k[:, 129:], v[:, 129:])]
    parts = [fa._flash_attn_forward(q, kb, vb, 0.0, None, False, -1, -1, 0.0, None, False)[:2] for kb, vb in blocks]
    lse = torch.logaddexp(parts[0][1], parts[1][1])
    out = sum(o.float() * torch.exp(l - lse).transpose(1, 2)[..., None] for o, l in parts).to(dtype)
    o_ref, lse_ref = fa_reference(q, k, v)
    check(out, lse, o_ref, lse_ref, dtype, "merged forward")
    dq = torch.zeros_like(q, dtype=torch.float32)
    dks, dvs = [], []
    for kb, vb in blocks:
        dq_block, dk, dv = torch.empty_like(q), torch.empty_like(kb), torch.empty_like(vb)
        fa._flash_attn_backward(d_o, q, kb, vb, out, lse, dq_block, dk, dv, 0.0, None, False, -1, -1, 0.0, None, False)
        dq += dq_block
        dks.append(dk)
        dvs.append(dv)
    torch.cuda.synchronize()
    refs = reference_gradients(q, k, v, d_o, {})
    for grad, a, e in zip(("dq", "dk", "dv"), (dq, torch.cat(dks, 1), torch.cat(dvs, 1)), refs):
        check_gradient(grad, a, e, REL_L2_BOUND[dtype], True, f"ring {dtype}")


# --- KV caches ------------------------------------------------------------------------------------------

CACHE_BATCH, N_CACHE = 3, 300
KVCACHE_CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "causal_window": dict(causal=True, window_size=(64, 0)),
    "alibi_causal": dict(causal=True, alibi_slopes=slopes()),
    "softcap_alibi_batched": dict(softcap=2.0, alibi_slopes=slopes(CACHE_BATCH)),
}


@pytest.mark.parametrize("lengths", ["tensor", "int", "leftpad"])
@pytest.mark.parametrize("n_q,n_new", [(1, 1), (4, 4), (3, 0)])
@pytest.mark.parametrize("name", KVCACHE_CASES)
def test_kvcache(name, n_q, n_new, lengths):
    """flash_attn_with_kvcache: k and v written into the caches at cache_seqlens (the rest
    untouched), then out and lse over each sequence's keys [cache_leftpad, cache_seqlens + n_new)
    (a sequence with no key gives 0 and -inf) against the reference."""
    keywords = KVCACHE_CASES[name]
    dtype, d = (torch.bfloat16, 128) if n_q == 4 else (torch.float16, 64)
    seed = 31 * n_q + n_new
    q = randn((CACHE_BATCH, n_q, HEADS, d), dtype, seed)
    k_cache = randn((CACHE_BATCH + 1, N_CACHE, HEADS_KV, d), dtype, seed + 1)
    v_cache = randn((CACHE_BATCH + 1, N_CACHE, HEADS_KV, d), dtype, seed + 2)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    k_new = randn((CACHE_BATCH, n_new, HEADS_KV, d), dtype, seed + 3) if n_new else None
    v_new = randn((CACHE_BATCH, n_new, HEADS_KV, d), dtype, seed + 4) if n_new else None
    starts = [17, 250, 0] if lengths != "int" else [150] * CACHE_BATCH
    seqlens = torch.tensor(starts, dtype=torch.int32, device=DEVICE) if lengths != "int" else 150
    leftpad = torch.tensor([5, 100, 0], dtype=torch.int32, device=DEVICE) if lengths == "leftpad" else None
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens,
                                         cache_leftpad=leftpad, return_softmax_lse=True, **keywords)
    torch.cuda.synchronize()
    for cache, before, new in ((k_cache, k_before, k_new), (v_cache, v_before, v_new)):
        expected = before.clone()
        for i, start in enumerate(starts):
            if n_new:
                expected[i, start:start + n_new] = new[i]
        assert torch.equal(cache, expected), "the append"
    lens = torch.tensor(starts, device=DEVICE) + n_new
    reference = reference_keywords(keywords)
    o_ref, lse_ref = fa_reference(q, k_cache[:CACHE_BATCH], v_cache[:CACHE_BATCH], key_lens=lens, key_start=leftpad,
                                  seqlen_k=N_CACHE, **reference)
    check(out, lse, o_ref, lse_ref, dtype, f"kvcache {name} {lengths} n_q={n_q} n_new={n_new}")


@pytest.mark.parametrize("n_q,n_new", [(1, 1), (4, 4), (3, 0)])
@pytest.mark.parametrize("name", ["plain", "causal", "causal_window", "alibi_causal", "softcap_alibi_batched"])
def test_kvcache_paged(name, n_q, n_new):
    """flash_attn_with_kvcache with a block_table: the same caches in shuffled pages of 16 rows; k
    and v land in their pages, and out and lse match the reference over each sequence's keys."""
    keywords = KVCACHE_CASES[name]
    dtype, d, page, n_cache = torch.bfloat16, 128, 16, 304
    seed = 57 * n_q + n_new
    q = randn((CACHE_BATCH, n_q, HEADS, d), dtype, seed)
    k_flat = randn((CACHE_BATCH, n_cache, HEADS_KV, d), dtype, seed + 1)
    v_flat = randn((CACHE_BATCH, n_cache, HEADS_KV, d), dtype, seed + 2)
    per = n_cache // page
    order = torch.randperm(CACHE_BATCH * per, generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    k_cache = torch.empty(CACHE_BATCH * per, page, HEADS_KV, d, dtype=dtype, device=DEVICE)
    v_cache = torch.empty_like(k_cache)
    k_cache[order], v_cache[order] = k_flat.reshape(-1, page, HEADS_KV, d), v_flat.reshape(-1, page, HEADS_KV, d)
    table = order.reshape(CACHE_BATCH, per).to(torch.int32)
    k_new = randn((CACHE_BATCH, n_new, HEADS_KV, d), dtype, seed + 3) if n_new else None
    v_new = randn((CACHE_BATCH, n_new, HEADS_KV, d), dtype, seed + 4) if n_new else None
    starts = [17, 250, 0]
    seqlens = torch.tensor(starts, dtype=torch.int32, device=DEVICE)
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, block_table=table,
                                         return_softmax_lse=True, **keywords)
    torch.cuda.synchronize()
    for i, start in enumerate(starts):  # the flat caches the appends should give
        if n_new:
            k_flat[i, start:start + n_new], v_flat[i, start:start + n_new] = k_new[i], v_new[i]
    assert torch.equal(k_cache[table.long()].reshape(k_flat.shape), k_flat), "the append into pages"
    assert torch.equal(v_cache[table.long()].reshape(v_flat.shape), v_flat), "the append into pages"
    lens = torch.tensor(starts, device=DEVICE) + n_new
    o_ref, lse_ref = fa_reference(q, k_flat, v_flat, key_lens=lens, key_start=None, seqlen_k=n_cache,
                                  **reference_keywords(keywords))
    check(out, lse, o_ref, lse_ref, dtype, f"paged kvcache {name} n_q={n_q} n_new={n_new}")


# --- packed (varlen) batches ---------------------------------------------------------------------------

VARLEN_CASES = ["plain", "causal", "causal_window", "window_left", "softcap", "alibi_causal", "softcap_alibi"]


@pytest.mark.skipif(not hasattr(kgen.torch, "varlen_attention"), reason="kgen.torch has no varlen_attention")
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", VARLEN_CASES)
def test_varlen(name, dtype):
    """flash_attn_varlen_func on 3 packed sequences (one query row against 40 keys, 130 against 130,
    300 against 57: causal rows that see nothing): each sequence's rows of out and of lse (h, total_q)
    against the reference of that sequence alone."""
    keywords = VARIANTS[name]
    lengths_q, lengths_k = [1, 130, 300], [40, 130, 57]
    cu_q = torch.tensor([0, 1, 131, 431], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, 40, 170, 227], dtype=torch.int32, device=DEVICE)
    d = 64
    q = randn((sum(lengths_q), HEADS, d), dtype, 41)
    k, v = (randn((sum(lengths_k), HEADS_KV, d), dtype, s) for s in (42, 43))
    with torch.no_grad():
        out, lse, probs = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k),
                                                    return_attn_probs=True, **keywords)
    torch.cuda.synchronize()
    assert probs is None and out.shape == q.shape and lse.shape == (HEADS, sum(lengths_q))
    for i in range(3):
        rows, keys = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        o_ref, lse_ref = fa_reference(q[rows][None], k[keys][None], v[keys][None], seqlen_k=max(lengths_k),
                                      **reference_keywords(keywords))
        check(out[rows][None], lse[:, rows][None], o_ref, lse_ref, dtype, f"varlen {name} {dtype} sequence {i}")
