"""GPU tests of the FP8 (E4M3) attention forward (docs/attention.md §11): kgen.torch.attention_forward
on torch.float8_e4m3fn q, k, v with descale factors (none, one per tensor, one per batch and K/V
head) against a float64 reference on the dequantised inputs, on NaN-poisoned outputs: rel_l2 and
cosine within the FP8 bound, the row rule on o, lse per element as in 16 bits (the softmax sums are
not rounded to E4M3). Odd sizes, GQA, causal with n_q > n_k (rows that see no key: o = 0,
lse = -inf), one-row decode, both layouts, bf16 and fp16 outputs, head dims 128 and 256. Each case
also runs kgen's bf16 forward on the same dequantised inputs and prints both errors. What FP8 does
not serve is refused with a KgenError naming the argument. Skipped unless an sm_90 GPU, PyTorch
with CUDA and libkgen.so are available."""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("the FP8 forward runs on sm_90a (Hopper) only", allow_module_level=True)

import kgen.torch  # noqa: E402
from kgen import KgenError  # noqa: E402
from kgen.testing import compare  # noqa: E402
from test_variant_gpu import row_errors  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

DEVICE = "cuda"
FP8 = torch.float8_e4m3fn
# The FP8 forward's bound on o: P is rounded to E4M3 (3 mantissa bits, up to 2^-4 relative) before
# the product with V, and o, a sum of terms of both signs, keeps that relative error: 0.95e-2 to
# 2.5e-2 on these inputs (bf16: 1.65e-3 to 3.65e-3). A row's own error may reach ROW_LIMIT: a zeroed or lost row
# errs by 1.
FP8_REL_L2_BOUND = 4e-2
ROW_LIMIT = 0.5
LSE_ATOL, LSE_RTOL = 2e-2, 2e-2
# (b, h_q, h_kv, n_q, n_k): odd sizes, GQA 4 and 1, n_q > n_k (causal rows that see no key),
# one-row decode, and a 1k square
SHAPES = [(1, 2, 1, 7, 7), (2, 8, 2, 130, 257), (1, 4, 4, 300, 129), (2, 4, 1, 1, 1000), (1, 2, 2, 1024, 1024)]


def generator(seed):
    return torch.Generator(device=DEVICE).manual_seed(seed)


def quantised(shape, descale_shape, seed):
    """(E4M3 tensor, its descale factors or None, the real values in float64): values of about
    N(0, 1) stored as x / descale; descale factors of shape (b, h_kv) apply to each group of
    shape[1] / h_kv heads (a query head takes its K/V head's)."""
    x = torch.randn(shape, generator=generator(seed), device=DEVICE)
    if descale_shape is None:
        stored = x.to(FP8)
        return stored, None, stored.double()
    descale = 0.25 + torch.rand(descale_shape, generator=generator(seed + 100), device=DEVICE)
    factor = descale
    if descale.dim():
        factor = descale.repeat_interleave(shape[1] // descale.shape[1], dim=1)[..., None, None]
    stored = (x / factor).to(FP8)
    return stored, descale, stored.double() * factor.double()


def reference(q, k, v, causal):
    """(o, lse) in float64 on logical (b, h, n, d) tensors."""
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ kk.transpose(-1, -2)) * q.shape[-1] ** -0.5
    n_q, n_k = q.shape[2], k.shape[2]
    hidden = torch.zeros(n_q, n_k, dtype=torch.bool, device=DEVICE)
    if causal:
        hidden = torch.arange(n_k, device=DEVICE)[None, :] > torch.arange(n_q, device=DEVICE)[:, None] + (n_k - n_q)
    empty = hidden.all(-1, keepdim=True)
    s = s.masked_fill(hidden, -math.inf).masked_fill(empty, 0.0)
    lse = torch.logsumexp(s, -1).masked_fill(empty.squeeze(-1), -math.inf)
    p = torch.softmax(s, -1).masked_fill(hidden, 0.0)
    return p @ vv, lse


def check_fp8(o, lse, o_ref, lse_ref, what):
    """§5.2's rule with the FP8 bound on o: finite, masked rows matched, rel_l2, cosine, the row
    rule; each lse within LSE_ATOL + LSE_RTOL·|ref|."""
    c = compare("o", o, o_ref, bound=FP8_REL_L2_BOUND)
    assert c.ok, f"{what}: {c}"
    errors = row_errors(o, o_ref)
    worst = int(torch.argmax(errors))
    assert float(errors[worst]) <= ROW_LIMIT, (
        f"{what}: o row {worst}: its error {float(errors[worst]):.2e} > {ROW_LIMIT:.2e}")
    finite = torch.isfinite(lse_ref)
    assert bool((lse[~finite] == lse_ref[~finite]).all()), f"{what}: lse of rows that see no key must be -inf"
    diff = (lse.double() - lse_ref)[finite].abs()
    assert bool((diff <= LSE_ATOL + LSE_RTOL * lse_ref[finite].abs()).all()), (
        f"{what}: lse off by up to {float(diff.max()):.2e}")
    return c.rel_l2


def params():
    for shape in SHAPES:
        for d in (128, 256):
            for causal in (False, True):
                for descale in ("none", "tensor", "head"):
                    if d == 256 and descale != "head":
                        continue
                    yield pytest.param(shape, d, causal, descale,
                                       id=f"{'x'.join(map(str, shape))}-d{d}-{'causal' if causal else 'full'}-{descale}")


@pytest.mark.parametrize("shape,d,causal,descale", list(params()))
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_fp8_forward_matches_float64(shape, d, causal, descale, out_dtype, layout):
    if layout == "bnhd" and out_dtype == torch.float16:
        pytest.skip("one output dtype in the second layout")
    b, h_q, h_kv, n_q, n_k = shape
    per = {"none": None, "tensor": (), "head": (b, h_kv)}[descale]
    q, dq, q64 = quantised((b, h_q, n_q, d), per, 1)
    k, dk, k64 = quantised((b, h_kv, n_k, d), per, 2)
    v, dv, v64 = quantised((b, h_kv, n_k, d), per, 3)
    o_ref, lse_ref = reference(q64, k64, v64, causal)
    shaped = (lambda t: t.transpose(1, 2).contiguous()) if layout == "bnhd" else (lambda t: t)
    logical = (lambda t: t.transpose(1, 2)) if layout == "bnhd" else (lambda t: t)
    out = torch.full(shaped(torch.empty(b, h_q, n_q, d)).shape, math.nan, dtype=out_dtype, device=DEVICE)
    lse = torch.full((b, h_q, n_q), math.nan, dtype=torch.float32, device=DEVICE)
    o, l = kgen.torch.attention_forward(shaped(q), shaped(k), shaped(v), causal=causal, layout=layout, out=out,
                                        lse=lse, return_lse=True, descale_q=dq, descale_k=dk, descale_v=dv)
    torch.cuda.synchronize()
    assert o is out and l is lse
    what = f"fp8 {shape} d={d} causal={causal} descale={descale} {out_dtype} {layout}"
    err = check_fp8(logical(o), l, o_ref, lse_ref, what)
    o16 = kgen.torch.attention_forward(q64.to(torch.bfloat16), k64.to(torch.bfloat16), v64.to(torch.bfloat16),
                                       causal=causal)
    err16 = compare("o", o16, o_ref, bound=1.0).rel_l2
    print(f"{what}: rel_l2 fp8 {err:.2e}, bf16 on the same inputs {err16:.2e}")


def test_fp8_forward_allocates_its_output_and_lse():
    q, _, q64 = quantised((2, 4, 200, 128), None, 5)
    k, _, k64 = quantised((2, 2, 333, 128), None, 6)
    v, _, v64 = quantised((2, 2, 333, 128), None, 7)
    o, lse = kgen.torch.attention_forward(q, k, v, causal=True, return_lse=True, out_dtype=torch.float16)
    assert o.dtype == torch.float16 and o.shape == (2, 4, 200, 128) and lse.shape == (2, 4, 200)
    o_ref, lse_ref = reference(q64, k64, v64, True)
    check_fp8(o, lse, o_ref, lse_ref, "allocated outputs")
    assert kgen.torch.attention_forward(q, k, v).dtype == torch.bfloat16


def test_fp8_explicit_configs_agree():
    q, _, q64 = quantised((1, 4, 500, 128), None, 8)
    k, _, k64 = quantised((1, 4, 700, 128), None, 9)
    v, _, v64 = quantised((1, 4, 700, 128), None, 10)
    o_ref, lse_ref = reference(q64, k64, v64, False)
    for config in ("ws:bm128:bn128:s2:pp1", "ws:bm128:bn128:s2:pp0", "ws:bm128:bn128:s3:pp1", "ws:bm128:bn128:s4:pp0",
                   "ws:bm128:bn192:s2:pp1", "ws:bm128:bn192:s2:pp0", "ws:bm128:bn192:s3:pp1", "ws:bm128:bn192:s4:pp1"):
        out = torch.full((1, 4, 500, 128), math.nan, dtype=torch.bfloat16, device=DEVICE)
        lse = torch.full((1, 4, 500), math.nan, dtype=torch.float32, device=DEVICE)
        kgen.torch.attention_forward(q, k, v, out=out, lse=lse, config=config)
        check_fp8(out, lse, o_ref, lse_ref, config)
    with pytest.raises(KgenError, match="config: fa2"):
        kgen.torch.attention_forward(q, k, v, config="fa2:bm128:bn64:w4:s2")


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("config", ["ws:bm128:bn192:s2:pp1", "ws:bm128:bn192:s3:pp0"])
def test_fp8_192_key_tiles_match_float64(shape, causal, config):
    """The 192-key tile (its transposed V in three 64-byte-swizzled column blocks of 64 keys) on
    every shape, head_dim 128, one descale factor per batch and K/V head."""
    b, h_q, h_kv, n_q, n_k = shape
    q, dq, q64 = quantised((b, h_q, n_q, 128), (b, h_kv), 21)
    k, dk, k64 = quantised((b, h_kv, n_k, 128), (b, h_kv), 22)
    v, dv, v64 = quantised((b, h_kv, n_k, 128), (b, h_kv), 23)
    o_ref, lse_ref = reference(q64, k64, v64, causal)
    out = torch.full((b, h_q, n_q, 128), math.nan, dtype=torch.bfloat16, device=DEVICE)
    lse = torch.full((b, h_q, n_q), math.nan, dtype=torch.float32, device=DEVICE)
    kgen.torch.attention_forward(q, k, v, causal=causal, out=out, lse=lse, descale_q=dq, descale_k=dk, descale_v=dv,
                                 config=config)
    torch.cuda.synchronize()
    check_fp8(out, lse, o_ref, lse_ref, f"{config} {shape} causal={causal}")


def test_fp8_refusals_name_the_argument():
    q, _, _ = quantised((1, 2, 64, 128), None, 11)
    k, _, _ = quantised((1, 2, 64, 128), None, 12)
    v, _, _ = quantised((1, 2, 64, 128), None, 13)
    with pytest.raises(KgenError, match="head_dim=64"):
        kgen.torch.attention_forward(q[..., :64].contiguous(), k[..., :64].contiguous(), v[..., :64].contiguous())
    with pytest.raises(KgenError, match="descale_k"):
        kgen.torch.attention_forward(q, k, v, descale_k=torch.ones(3, device=DEVICE))
    with pytest.raises(KgenError, match="descale_q: dtype"):
        kgen.torch.attention_forward(q, k, v, descale_q=torch.ones(1, dtype=torch.float16, device=DEVICE))
    with pytest.raises(KgenError, match="out_dtype"):
        kgen.torch.attention_forward(q, k, v, out_dtype=torch.float32)
    wide, _, _ = quantised((1, 2, 64, 256), None, 14)
    with pytest.raises(KgenError, match="config: ws:bm128:bn192:s2:pp1"):
        kgen.torch.attention_forward(wide, wide, wide, config="ws:bm128:bn192:s2:pp1")
    with pytest.raises(KgenError, match="window"):
        kgen.torch.attention_forward(q, k, v, window=(16, 0))
    with pytest.raises(KgenError, match="k: dtype"):
        kgen.torch.attention_forward(q, k.to(torch.bfloat16), v)
    with pytest.raises(KgenError, match="descale_q"):
        kgen.torch.attention_forward(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16),
                                     descale_q=torch.ones(1, device=DEVICE))
