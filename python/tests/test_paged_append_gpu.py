"""GPU tests of the paged K/V append and plan/run (docs/attention.md §10): kgen.torch.paged_append
against kgen.testing's float64 reference (shuffled pages, appends crossing page boundaries,
rotary in both styles, q in place or not, NaN-poisoned caches left alone outside the written
rows), flash_attn_with_kvcache with k, v and rotary tables against the same reference followed by
paged attention, and kgen.torch.PagedAttention's run inside a CUDA graph giving the plain call's
bits. Skipped unless PyTorch with CUDA and libkgen.so are available."""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen.testing  # noqa: E402
import kgen.torch  # noqa: E402
from kgen import flash_attn_interface as fa  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")
DEVICE = "cuda"
ULP = {torch.float32: 2.0 ** -22, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def _table(lens, n_new, page, seed):
    """(block_table int32 (b, max_pages + 1) with -1 after each row's pages, num_pages): shuffled pages."""
    pages = [math.ceil((n + n_new) / page) for n in lens]
    num_pages = sum(pages) + 2
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).tolist()
    table = torch.full((len(lens), max(pages) + 1), -1, dtype=torch.int32)
    used = 0
    for b, p in enumerate(pages):
        table[b, :p] = torch.tensor(order[used:used + p], dtype=torch.int32)
        used += p
    return table.to(DEVICE), num_pages


def _tables(positions, rotary_dim, dtype):
    inv = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv
    return angles.cos().to(DEVICE, dtype), angles.sin().to(DEVICE, dtype)


def _close(got, want, dtype, what):
    tol = 2 * ULP[dtype]
    err = (got.double() - want.double()).abs() - tol * (want.double().abs() + 1)
    assert bool((err <= 0).all()), f"{what}: max excess {err.max().item()}"


CASES = {  # dtype, h_q, h_kv, d, page, n_new, lens, rotary (None, "neox", "gptj"), rotary_dim, table dtype
    "copy_bf16_n1": (torch.bfloat16, 8, 2, 128, 16, 1, [0, 15, 33], None, 0, None),
    "neox_bf16_n4": (torch.bfloat16, 32, 8, 128, 16, 4, [14, 0, 200], "neox", 128, None),
    "gptj_f16_n16_part": (torch.float16, 8, 2, 128, 64, 16, [50, 63, 1], "gptj", 64, None),
    "neox_f16_n4_fp32_tables": (torch.float16, 4, 4, 64, 16, 4, [13, 29], "neox", 32, torch.float32),
    "gptj_f32_n4": (torch.float32, 4, 2, 64, 16, 4, [7, 40], "gptj", 64, None),
}


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("name", CASES)
def test_paged_append_matches_the_reference(name, in_place):
    dtype, h_q, h_kv, d, page, n_new, lens, rotary, rotary_dim, table_dtype = CASES[name]
    b = len(lens)
    table, num_pages = _table(lens, n_new, page, seed=len(name))
    g = torch.Generator(device=DEVICE).manual_seed(7)
    k = torch.randn(b, n_new, h_kv, d, generator=g, device=DEVICE).to(dtype)
    v = torch.randn(b, n_new, h_kv, d, generator=g, device=DEVICE).to(dtype)
    q = torch.randn(b, n_new, h_q, d, generator=g, device=DEVICE).to(dtype)
    k_cache = torch.full((num_pages, page, h_kv, d), float("nan"), dtype=dtype, device=DEVICE)
    v_cache = k_cache.clone()
    want_k, want_v = k_cache.clone(), v_cache.clone()
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    rot = {}
    if rotary:
        cos, sin = _tables(table.shape[1] * page, rotary_dim, table_dtype or dtype)
        rot = dict(rotary_cos=cos, rotary_sin=sin, rotary_interleaved=rotary == "gptj")
    q_orig = q.clone()
    want_q = kgen.testing.paged_append_reference(k, v, want_k, want_v, table, lens_t, q=q if rotary else None, **rot)
    got_q = kgen.torch.paged_append(k, v, k_cache, v_cache, table, lens_t, q=q if rotary else None,
                                    q_out=None if in_place or not rotary else torch.empty_like(q), **rot)
    torch.cuda.synchronize()
    written = ~torch.isnan(want_k)
    assert torch.equal(torch.isnan(k_cache), ~written) and torch.equal(torch.isnan(v_cache), ~written), \
        "rows outside the appended ones were written (or appended ones missed)"
    assert torch.equal(v_cache[written], want_v[written]), "values are copied bit for bit"
    _close(k_cache[written], want_k[written], dtype, "rotated keys")
    if rotary:
        _close(got_q, want_q, dtype, "rotated q")
        assert (got_q is q) == in_place and (in_place or torch.equal(q, q_orig))


def test_flash_attn_with_kvcache_appends_rotated_rows_and_attends_to_them():
    dtype, b, h_q, h_kv, d, page, n_new = torch.bfloat16, 3, 16, 4, 128, 16, 4
    lens = [14, 30, 3]
    table, num_pages = _table(lens, n_new, page, seed=3)
    g = torch.Generator(device=DEVICE).manual_seed(11)
    k_cache = torch.randn(num_pages, page, h_kv, d, generator=g, device=DEVICE).to(dtype)
    v_cache = torch.randn(num_pages, page, h_kv, d, generator=g, device=DEVICE).to(dtype)
    q = torch.randn(b, n_new, h_q, d, generator=g, device=DEVICE).to(dtype)
    k = torch.randn(b, n_new, h_kv, d, generator=g, device=DEVICE).to(dtype)
    v = torch.randn(b, n_new, h_kv, d, generator=g, device=DEVICE).to(dtype)
    cos, sin = _tables(table.shape[1] * page, 64, dtype)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    before = k_cache.clone()
    want_k, want_v = k_cache.clone(), v_cache.clone()
    q_rot = kgen.testing.paged_append_reference(k, v, want_k, want_v, table, lens_t, rotary_cos=cos, rotary_sin=sin,
                                                rotary_interleaved=True, q=q)
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=cos, rotary_sin=sin,
                                     cache_seqlens=lens_t, block_table=table, causal=True)
    _close(k_cache, want_k, dtype, "the rotated append")
    assert torch.equal(v_cache, want_v)
    assert int((k_cache != before).sum()) > 0  # the call appended
    want = kgen.torch.paged_attention(q_rot, want_k, want_v, table, lens_t + n_new, causal=True)
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("n_q", [1, 4])
def test_plan_run_in_a_cuda_graph_gives_the_plain_calls_bits(n_q):
    dtype, b, h_q, h_kv, d, page = torch.bfloat16, 4, 32, 8, 128, 64
    lens = [4096, 100, 8000, 1]
    table, num_pages = _table(lens, 0, page, seed=5)
    table = torch.where(table < 0, torch.zeros_like(table), table)
    g = torch.Generator(device=DEVICE).manual_seed(13)
    k_cache = torch.randn(num_pages, page, h_kv, d, generator=g, device=DEVICE).to(dtype)
    v_cache = torch.randn(num_pages, page, h_kv, d, generator=g, device=DEVICE).to(dtype)
    q = torch.randn(b, n_q, h_q, d, generator=g, device=DEVICE).to(dtype)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    want, want_lse = kgen.torch.paged_attention(q, k_cache, v_cache, table, lens_t, causal=True, return_lse=True)

    wrapper = kgen.torch.PagedAttention().plan(q, k_cache, v_cache, table, lens_t, causal=True, return_lse=True)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h_q, n_q), float("nan"), device=DEVICE)
    wrapper.run(q, k_cache, v_cache, table, lens_t, out=out, lse=lse)  # warm-up outside the graph
    out.fill_(float("nan")), lse.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        wrapper.run(q, k_cache, v_cache, table, lens_t, out=out, lse=lse)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want) and torch.equal(lse, want_lse), wrapper.config
    # A new step: new lengths and a new query, the same graph.
    lens_t.copy_(torch.tensor([4097, 101, 8001, 2], dtype=torch.int32))
    q.copy_(torch.randn(b, n_q, h_q, d, generator=g, device=DEVICE).to(dtype))
    graph.replay()
    torch.cuda.synchronize()
    want, want_lse = kgen.torch.paged_attention(q, k_cache, v_cache, table, lens_t, causal=True, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse), wrapper.config


def test_plan_run_errors_name_the_argument():
    dtype, b, h, d, page = torch.bfloat16, 2, 4, 64, 16
    k_cache = torch.randn(8, page, h, d, device=DEVICE, dtype=dtype)
    table = torch.arange(8, dtype=torch.int32, device=DEVICE).reshape(2, 4)
    lens = torch.tensor([20, 64], dtype=torch.int32, device=DEVICE)
    q = torch.randn(b, 1, h, d, device=DEVICE, dtype=dtype)
    wrapper = kgen.torch.PagedAttention().plan(q, k_cache, k_cache, table, lens)
    with pytest.raises(kgen.torch.KgenError, match=r"^q: bf16 \(3, "):
        wrapper.run(torch.randn(3, 1, h, d, device=DEVICE, dtype=dtype), k_cache, k_cache, table,
                    torch.tensor([1, 2, 3], dtype=torch.int32, device=DEVICE))
    with pytest.raises(kgen.torch.KgenError, match=r"^cache_seqlens: missing"):
        wrapper.run(q, k_cache, k_cache, table, None)
    with pytest.raises(kgen.torch.KgenError, match=r"^cache_seqlens: missing"):
        kgen.torch.paged_append(q[:, :, :1], q[:, :, :1], k_cache[:, :, :1], k_cache[:, :, :1], table, None)
    with pytest.raises(kgen.torch.KgenError, match=r"^rotary\.cos: 4 positions, fewer than the 64"):
        cos = torch.ones(4, 8, device=DEVICE, dtype=dtype)
        kgen.torch.paged_append(q, q, k_cache, k_cache, table, lens, rotary_cos=cos, rotary_sin=cos)
