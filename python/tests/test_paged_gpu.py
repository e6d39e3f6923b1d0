"""GPU tests of kgen.torch.paged_attention (paged K/V caches, docs/attention.md §10): decode and
chunked-prefill queries against caches in shuffled pages with partial last pages, each batch
against a float64 reference over its keys gathered densely (docs/attention.md §5.2's rule with
the row rule), the same call on a contiguous cache (one page per sequence) against kgen's dense
kernel, and errors that name the argument. Skipped unless PyTorch with CUDA and libkgen.so are
available."""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.torch  # noqa: E402
from test_variant_gpu import check  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")
DEVICE = "cuda"


def _paged(lens, page, h_kv, d, dtype, seed):
    """(k_cache, v_cache, block_table, cache_seqlens, dense k list, dense v list) in shuffled pages."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    pages = [math.ceil(n / page) for n in lens]
    num_pages = sum(pages) + 2
    k_cache = torch.randn(num_pages, page, h_kv, d, generator=g, device=DEVICE).to(dtype)
    v_cache = torch.randn(num_pages, page, h_kv, d, generator=g, device=DEVICE).to(dtype)
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).tolist()
    table = torch.full((len(lens), max(pages) + 1), -1, dtype=torch.int32)
    dense_k, dense_v, used = [], [], 0
    for b, (n, p) in enumerate(zip(lens, pages)):
        ids = order[used:used + p]
        used += p
        table[b, :p] = torch.tensor(ids, dtype=torch.int32)
        dense_k.append(k_cache[ids].reshape(-1, h_kv, d)[:n])
        dense_v.append(v_cache[ids].reshape(-1, h_kv, d)[:n])
    return k_cache, v_cache, table.to(DEVICE), torch.tensor(lens, dtype=torch.int32, device=DEVICE), dense_k, dense_v


def _reference(q, dense_k, dense_v, causal, scale):
    """float64 o (b, n_q, h_q, d) and lse (b, h_q, n_q)."""
    outs, lses = [], []
    h_q = q.shape[2]
    for b, (k, v) in enumerate(zip(dense_k, dense_v)):
        qs = q[b].double().transpose(0, 1)
        ks = k.double().transpose(0, 1).repeat_interleave(h_q // k.shape[1], 0)
        vs = v.double().transpose(0, 1).repeat_interleave(h_q // k.shape[1], 0)
        s = qs @ ks.transpose(1, 2) * scale
        n_q, n_k = s.shape[1], s.shape[2]
        if causal:
            i = torch.arange(n_q, device=DEVICE)[:, None] + (n_k - n_q)
            s = s.masked_fill(torch.arange(n_k, device=DEVICE)[None, :] > i, -math.inf)
        lse = torch.logsumexp(s, dim=2)
        outs.append((torch.exp(s - lse[..., None]).nan_to_num(0.0) @ vs).transpose(0, 1))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


@pytest.mark.parametrize("n_q,h,page,dtype", [(1, (32, 4), 16, torch.bfloat16), (4, (8, 8), 64, torch.float16),
                                              (16, (16, 2), 256, torch.bfloat16)])
def test_matches_gathered_reference(n_q, h, page, dtype):
    lens = [n_q, 17 + n_q, 300, 2049]
    d = 128
    k_cache, v_cache, table, seqlens, dk, dv = _paged(lens, page, h[1], d, dtype, 7)
    q = torch.randn(len(lens), n_q, h[0], d, device=DEVICE).to(dtype)
    o, lse = kgen.torch.paged_attention(q, k_cache, v_cache, table, seqlens, causal=True, return_lse=True)
    o_ref, lse_ref = _reference(q, dk, dv, True, 1 / math.sqrt(d))
    check(o, lse, o_ref, lse_ref, dtype, f"paged n_q={n_q} page={page}")


@pytest.mark.parametrize("b", [20, 40], ids=["one_block_per_sm", "two_blocks_per_sm"])
@pytest.mark.parametrize("n_q,page,d", [(1, 16, 128), (4, 64, 64), (2, 32, 128)])
def test_decode_grids_of_many_sequences(b, n_q, page, d):
    """Many sequences (h_q = 16 over h_kv = 8): the grids whose defaults run one warpgroup per
    block, 128-key tiles (b = 20) or 64-key tiles (b = 40), gathering their rows from the pages;
    lengths with partial last pages and one shorter than a tile."""
    lens = [n_q + 3 if i % 7 == 0 else (37 * i * i + 11 * i) % 3000 + 1030 for i in range(b)]
    dtype = torch.bfloat16 if d == 128 else torch.float16
    k_cache, v_cache, table, seqlens, dk, dv = _paged(lens, page, 8, d, dtype, b + page)
    q = torch.randn(b, n_q, 16, d, device=DEVICE).to(dtype)
    o, lse = kgen.torch.paged_attention(q, k_cache, v_cache, table, seqlens, causal=True, return_lse=True)
    o_ref, lse_ref = _reference(q, dk, dv, True, 1 / math.sqrt(d))
    check(o, lse, o_ref, lse_ref, dtype, f"paged b={b} n_q={n_q} page={page} d={d}")


@pytest.mark.parametrize("form", ["o", "o_lse", "out", "out_lse"])
def test_repeated_calls_take_new_data(form):
    """A decode loop's calls of one shape: the first runs packed once, the second builds the call
    form, the later ones write only the data pointers into it (_calls.paged_forward_out). Each call
    gets new q, caches, table and lengths (same shapes), into a NaN-poisoned out where given, and
    matches its own reference."""
    lens = [5, 700, 2049, 1]
    d, dtype = 128, torch.bfloat16
    for step in range(4):
        k_cache, v_cache, table, seqlens, dk, dv = _paged(lens, 16, 4, d, dtype, 100 + step)
        q = torch.randn(len(lens), 1, 16, d, device=DEVICE).to(dtype)
        with_lse = form.endswith("lse")
        if form.startswith("out"):
            out = torch.full_like(q, math.nan)
            got = kgen.torch.paged_attention(q, k_cache, v_cache, table, seqlens, out=out, return_lse=with_lse)
            o = got[0] if with_lse else got
            assert o is out
        else:
            got = kgen.torch.paged_attention(q, k_cache, v_cache, table, seqlens, return_lse=with_lse)
            o = got[0] if with_lse else got
        o_ref, lse_ref = _reference(q, dk, dv, False, 1 / math.sqrt(d))
        lse = got[1] if with_lse else lse_ref.float()
        check(o, lse, o_ref, lse_ref, dtype, f"paged call {step} ({form})")


def test_contiguous_cache_matches_dense_kernel():
    b, n, h, d = 3, 1024, 8, 64
    k = torch.randn(b, n, h, d, device=DEVICE).bfloat16()
    v = torch.randn(b, n, h, d, device=DEVICE).bfloat16()
    q = torch.randn(b, 1, h, d, device=DEVICE).bfloat16()
    table = torch.arange(b * (n // 256), dtype=torch.int32, device=DEVICE).reshape(b, -1)
    o = kgen.torch.paged_attention(q, k.reshape(-1, 256, h, d), v.reshape(-1, 256, h, d), table)
    dense = kgen.torch.attention_forward(q, k, v, layout="bnhd")
    torch.testing.assert_close(o.float(), dense.float(), rtol=2e-2, atol=2e-2)


def test_errors_name_the_argument():
    k_cache = torch.randn(4, 16, 2, 64, device=DEVICE).bfloat16()
    q = torch.randn(2, 1, 2, 64, device=DEVICE).bfloat16()
    table = torch.zeros(2, 2, dtype=torch.int32, device=DEVICE)
    with pytest.raises(kgen.torch.KgenError, match="block_table"):
        kgen.torch.paged_attention(q, k_cache, k_cache, table.long())
    with pytest.raises(kgen.torch.KgenError, match="page_size"):
        kgen.torch.paged_attention(q, k_cache.reshape(8, 8, 2, 64), k_cache.reshape(8, 8, 2, 64), table)
    with pytest.raises(kgen.torch.KgenError, match="cache_seqlens"):
        kgen.torch.paged_attention(q, k_cache, k_cache, table, torch.zeros(3, dtype=torch.int32, device=DEVICE))
