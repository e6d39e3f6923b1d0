"""GPU tests of kgen.torch against a float64 CPU reference (docs/attention.md §5). Skipped
unless PyTorch with CUDA and libkgen.so are available."""
import math
import re

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kgen  # noqa: E402
import kgen.torch  # noqa: E402
from kgen.testing import attention_reference, check_attention  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
SHAPES = [(1, 1), (7, 7), (63, 63), (1000, 1000),  # (n_q, n_k): no multiple of any tile
          (7, 63), (1, 1000), (63, 7), (1000, 63)]  # n_q > n_k: causal fully masks rows


def randn(shape, dtype, seed, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).to(device)


def inputs(b, h_q, h_kv, n_q, n_k, d, dtype, layout, seed=0):
    """q, k, v in `layout` (bnhd tensors are stored (b, n, h, d)), fresh random normal."""
    def shape(h, n):
        return (b, n, h, d) if layout == "bnhd" else (b, h, n, d)
    return (randn(shape(h_q, n_q), dtype, seed), randn(shape(h_kv, n_k), dtype, seed + 1),
            randn(shape(h_kv, n_k), dtype, seed + 2))


def logical(t, layout):
    return t.transpose(1, 2) if layout == "bnhd" else t


def run_and_check(q, k, v, *, causal, layout, scale=None, ref_device="cpu"):
    """kgen on NaN-poisoned o and lse, checked against the float64 reference on `ref_device`."""
    lq, lk, lv = (logical(t, layout) for t in (q, k, v))
    out = torch.full_like(q, math.nan)
    lse = torch.full(lq.shape[:-1], math.nan, dtype=torch.float32, device=q.device)
    o, l = kgen.torch.attention_forward(q, k, v, causal=causal, scale=scale, layout=layout,
                                        out=out, lse=lse, return_lse=True)
    assert o is out and l is lse
    torch.cuda.synchronize()
    o_ref, lse_ref = attention_reference(*(t.to(ref_device) for t in (lq, lk, lv)),
                                         causal=causal, scale=scale)
    checks = check_attention(logical(o, layout), l, o_ref, lse_ref, q.dtype)
    assert all(c.ok for c in checks), "\n".join(map(str, checks))
    return o, l


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("group", [1, 4], ids=["mha", "gqa4"])
@pytest.mark.parametrize("n_q,n_k", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_forward(dtype, d, causal, n_q, n_k, group, layout):
    q, k, v = inputs(2, 2 * group, 2, n_q, n_k, d, dtype, layout, seed=n_q * 7 + n_k)
    o, lse = run_and_check(q, k, v, causal=causal, layout=layout)
    if causal and n_q > n_k:  # rows i < n_q - n_k see no key
        masked = n_q - n_k
        assert torch.all(logical(o, layout)[:, :, :masked] == 0)
        assert torch.all(lse[:, :, :masked] == -math.inf)


# Causal shapes whose default runs on one block per query tile in sections of 2^s heads
# (docs/kernels/forward.md, "Causal grids in sections of heads"): d = 64 from 2k keys, d = 128 above
# 4k, d = 160 and 192 at every length, d = 256 above 8k. Heads that no power of two above 1 divides,
# GQA, batches of several sections, n_q > n_k (rows that see no key) and n_q < n_k.
SECTION_SHAPES = [  # d, b, h_q, h_kv, n_q, n_k
    (64, 2, 12, 4, 2048, 2048), (64, 3, 5, 5, 2100, 2100), (64, 2, 16, 16, 2500, 2048),
    (128, 2, 8, 2, 4100, 4100), (128, 1, 6, 6, 3000, 4200), (160, 2, 8, 8, 1000, 1000),
    (192, 3, 4, 1, 700, 700), (256, 1, 4, 4, 8300, 8300)]


@pytest.mark.parametrize("shape", SECTION_SHAPES, ids=lambda s: "d{}-b{}-h{}x{}-{}x{}".format(*s))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_causal_sections(dtype, shape):
    d, b, h_q, h_kv, n_q, n_k = shape
    layout = "bnhd" if n_q == 2100 else "bhnd"
    q, k, v = inputs(b, h_q, h_kv, n_q, n_k, d, dtype, layout, seed=d + n_q)
    o, lse = run_and_check(q, k, v, causal=True, layout=layout, ref_device="cuda")
    if n_q > n_k:
        assert torch.all(logical(o, layout)[:, :, :n_q - n_k] == 0)
        assert torch.all(lse[:, :, :n_q - n_k] == -math.inf)


def test_explicit_scale():
    q, k, v = inputs(1, 4, 4, 100, 130, 64, torch.bfloat16, "bhnd")
    run_and_check(q, k, v, causal=True, layout="bhnd", scale=0.3)


def test_packed_qkv_strides():
    """q, k, v as slices of one (b, n, 3, h, d) tensor: BNHD views with a 3·h·d row stride."""
    qkv = randn((2, 300, 3, 4, 64), torch.float16, 3)
    q, k, v = qkv.unbind(2)
    run_and_check(q, k, v, causal=True, layout="bnhd")


def test_many_waves():
    """b·h·(n / tile) far above the SM count; float64 reference on the GPU."""
    q, k, v = inputs(4, 32, 8, 1024, 1024, 128, torch.bfloat16, "bhnd")
    run_and_check(q, k, v, causal=True, layout="bhnd", ref_device="cuda")


@pytest.mark.parametrize("b", [1, 20, 40], ids=["split", "one_block_per_sm", "two_blocks_per_sm"])
@pytest.mark.parametrize("n_q,n_k", [(1, 1024), (3, 1500), (16, 4097)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_decode_grids(d, causal, n_q, n_k, b):
    """Decode-like calls (h_q = 16 over h_kv = 8, a few query rows, long keys) on the grids the
    defaults pick by batch: keys split over blocks (b = 1), one block per SM and 128-key tiles
    (b = 20), two blocks per SM and 64-key tiles (b = 40); float64 reference on the GPU."""
    dtype = torch.float16 if d == 64 else torch.bfloat16
    q, k, v = inputs(b, 16, 8, n_q, n_k, d, dtype, "bnhd", seed=b * 31 + n_k)
    run_and_check(q, k, v, causal=causal, layout="bnhd", ref_device="cuda")


def test_gpu_reference_matches_cpu_reference():
    q, k, v = (t.double() for t in inputs(2, 4, 2, 63, 90, 64, torch.float32, "bhnd"))
    for causal in (False, True):
        gpu = attention_reference(q, k, v, causal=causal, dtype=torch.float32, chunk_bytes=4096)
        cpu = attention_reference(q.cpu(), k.cpu(), v.cpu(), causal=causal)
        for a, b in zip(gpu, cpu):
            torch.testing.assert_close(a.cpu().double(), b, rtol=1e-5, atol=1e-5)


def test_allocates_outputs_in_the_layout_of_q():
    q, k, v = inputs(2, 4, 4, 33, 33, 64, torch.float16, "bnhd")
    o = kgen.torch.attention_forward(q, k, v, layout="bnhd")
    assert o.shape == q.shape and o.is_contiguous() and o.dtype == q.dtype
    o2, lse = kgen.torch.attention_forward(q, k, v, layout="bnhd", return_lse=True)
    assert lse.shape == (2, 4, 33) and lse.dtype == torch.float32
    assert torch.equal(o, o2)


@pytest.mark.parametrize("d", [32, 80, 96, 256])
def test_other_head_dims_work_or_are_refused(d):
    q, k, v = inputs(1, 2, 2, 65, 65, d, torch.bfloat16, "bhnd")
    try:
        run_and_check(q, k, v, causal=False, layout="bhnd")
    except kgen.KgenError as e:
        assert e.status == kgen.Status.INVALID_ARGUMENT and str(e), e


def invalid_argument(message_pattern, q, k, v, **kw):
    with pytest.raises(kgen.KgenError) as e:
        kgen.torch.attention_forward(q, k, v, **kw)
    assert e.value.status == kgen.Status.INVALID_ARGUMENT, e.value
    assert re.search(message_pattern, str(e.value)), str(e.value)


def test_library_errors_name_the_argument():
    q, k, v = inputs(1, 4, 4, 16, 16, 64, torch.float16, "bhnd")
    out = torch.empty_like(q)  # a valid o, so that only the argument under test is wrong
    invalid_argument(r"\bq\b", q.double(), k, v, out=out)  # unsupported dtype
    invalid_argument(r"\bq\b", q.cpu(), k, v, out=out)  # wrong device
    invalid_argument(r"\bq\b", q[0], k, v, out=out)  # 3-d
    invalid_argument(r"\b[qk]\b", q, k[:, :3], v[:, :3])  # 4 % 3 query heads per kv head


def test_python_side_errors():
    q, k, v = inputs(1, 2, 2, 16, 16, 64, torch.float16, "bhnd")
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        kgen.torch.attention_forward(q.cpu().numpy(), k, v)
    with pytest.raises(ValueError, match="layout"):
        kgen.torch.attention_forward(q, k, v, layout="nhd")
    with pytest.raises(ValueError, match="scale"):
        kgen.torch.attention_forward(q, k, v, scale=0.0)


@pytest.mark.skipif(not hasattr(torch.cuda, "_sleep"), reason="needs torch.cuda._sleep")
def test_runs_on_the_current_stream():
    """On a side stream, q is written after a ~50 ms spin; a kernel launched on any other
    stream (PyTorch's side streams do not sync with the legacy default stream) reads NaN."""
    q, k, v = inputs(1, 2, 2, 256, 256, 64, torch.bfloat16, "bhnd")
    q_final = q.clone()
    q.fill_(math.nan)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)
        q.copy_(q_final)
        o, lse = kgen.torch.attention_forward(q, k, v, return_lse=True)
    stream.synchronize()
    o_ref, lse_ref = attention_reference(q_final.cpu(), k.cpu(), v.cpu())
    checks = check_attention(o, lse, o_ref, lse_ref, q.dtype)
    assert all(c.ok for c in checks), "\n".join(map(str, checks))
