"""kgen.torch.lrpe_cosine / md_lrpe_cosine against the PyTorch formulation (docs/lrpe.md):
forward and backward through autograd, every act, layouts, theta shapes, odd sizes, md grids.
Argument errors raised in Python run without a GPU; the rest skips without CUDA."""
import math

import pytest

torch = pytest.importorskip("torch")

import kgen  # noqa: E402
import kgen.torch  # noqa: E402
from kgen.testing import check_lrpe, lrpe_reference  # noqa: E402

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="no CUDA device")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
ACTS = [("none", None), ("relu", None), ("sigmoid", None), ("silu", None), ("softmax", -1), ("softmax", "seq")]


# --- no GPU needed: Python-side argument checks ---------------------------------------------------

def test_unknown_act_and_bad_dim_are_value_errors():
    x, theta = torch.zeros(1, 2, 3, 4), torch.zeros(2, 4)
    with pytest.raises(ValueError, match="act"):
        kgen.torch.lrpe_cosine(x, theta, act="gelu")
    with pytest.raises(ValueError, match="dim"):
        kgen.torch.lrpe_cosine(x, theta, act="softmax", dim=1)  # heads axis of bhnd
    with pytest.raises(ValueError, match="dim applies"):
        kgen.torch.lrpe_cosine(x, theta, act="silu", dim=-1)
    with pytest.raises(ValueError, match="shape"):
        kgen.torch.md_lrpe_cosine(x, theta, shape=(1, 1, 1, 3))


def test_non_tensor_arguments_are_type_errors():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        kgen.torch.lrpe_cosine([[1.0]], torch.zeros(1, 1))


def test_cpu_tensors_are_rejected_naming_x(kgen_library):
    x, theta = torch.zeros(1, 2, 3, 4), torch.zeros(2, 4)
    with pytest.raises(kgen.KgenError) as e:
        kgen.torch.lrpe_cosine(x, theta)
    assert e.value.status == kgen.Status.INVALID_ARGUMENT
    assert str(e.value).startswith("x:"), str(e.value)


# --- GPU ------------------------------------------------------------------------------------------

def randn(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).cuda()


def make_theta(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    base = 10000.0 ** (-torch.arange(cols, dtype=torch.float64) / cols)
    return (base * (0.5 + 0.5 * torch.rand(rows, cols, generator=g, dtype=torch.float64))).float().cuda()


def logical(t, layout):
    return t.transpose(1, 2) if layout == "bnhd" and t.dim() == 4 else t


def run_both(fn, ref_fn, x, dtype):
    """Forward and x.grad of kgen against the float64 formulation with the same dO."""
    x = x.detach().requires_grad_(True)
    o = fn(x)
    d_o = torch.randn_like(o)
    o.backward(d_o)
    x64 = x.detach().double().requires_grad_(True)
    o_ref = ref_fn(x64)
    o_ref.backward(d_o.double())
    checks = [check_lrpe(o.detach(), o_ref.detach(), dtype, "o"), check_lrpe(x.grad, x64.grad, dtype, "dx")]
    assert all(c.ok for c in checks), "\n".join(map(str, checks))


def seq_dim(layout, x):
    return 1 if (layout == "bnhd" or x.dim() == 3) else -2


@gpu
@pytest.mark.usefixtures("kgen_library")
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("act,dim", ACTS, ids=[f"{a}{'' if d is None else d}" for a, d in ACTS])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("b,h,n,d,theta_kind", [(2, 3, 33, 33, "hd"), (1, 4, 257, 48, "h1"), (2, 2, 100, 128, "1d")])
def test_lrpe_cosine(dtype, act, dim, layout, b, h, n, d, theta_kind):
    x = randn((b, n, h, d) if layout == "bnhd" else (b, h, n, d), dtype, seed=n + d)
    theta = make_theta(1 if theta_kind == "1d" else h, 1 if theta_kind == "h1" else d, seed=d)
    offset = 1000 if n % 2 else 0
    if dim == "seq":
        dim = seq_dim(layout, x)
    ref_act = "softmax_seq" if (act == "softmax" and dim not in (None, -1)) else act

    def fn(t):
        return kgen.torch.lrpe_cosine(t, theta, offset=offset, act=act, dim=dim, layout=layout)

    def ref(t):
        return logical(lrpe_reference(logical(t, layout), theta, act=ref_act, offset=offset), layout)
    run_both(fn, ref, x, dtype)


@gpu
@pytest.mark.usefixtures("kgen_library")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("act,dim", [("none", None), ("silu", None), ("softmax", -1), ("softmax", "seq")])
@pytest.mark.parametrize("shape,l", [((33,), 0), ((5, 7), 10), ((3, 4, 5), 0), ((4, 4, 4), 10)])
@pytest.mark.parametrize("cache", [False, True])
def test_md_lrpe_cosine(dtype, act, dim, shape, l, cache):
    b, h, d = 2, 3, 64
    n = l + math.prod(shape)
    x = randn((b, h, n, d), dtype, seed=n)
    theta = make_theta(h, -(-d // len(shape)), seed=len(shape))
    if dim == "seq":
        dim = -2
    ref_act = "softmax_seq" if (act == "softmax" and dim == -2) else act

    def fn(t):
        return kgen.torch.md_lrpe_cosine(t, theta, shape, l=l, act=act, dim=dim, cache=cache)

    def ref(t):
        return lrpe_reference(t, theta, act=ref_act, shape=shape, l=l)
    run_both(fn, ref, x, dtype)


@gpu
@pytest.mark.usefixtures("kgen_library")
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("b,h,n,d,config", [
    (12, 12, 4096, 128, None),                    # 16-bit: 6 splits per slice, one wave of blocks
    (12, 12, 4096, 128, "bp:t128:r2:v8:o6"),      # other occupancies of the default's tile
    (12, 12, 4096, 128, "bp:t128:r2:v8:o8"),
    (12, 12, 4096, 128, "bp:t128:r2:v8:b2:o6"),   # the same with two slices per block
    (3, 5, 2999, 40, "bp:t128:r2:v8:o8"),         # odd rows and a partial row group, one wave
    (50, 12, 100, 128, None),                     # 3 splits over two waves
    (80, 12, 256, 128, None),                     # one split per slice
])
def test_softmax_over_the_sequence_at_benchmark_sizes_and_every_split_shape(dtype, b, h, n, d, config):
    """Softmax over the sequence where the splits of lrpe_bp_splits take each shape on an H200
    (132 SMs) with the default config: many splits in one wave, splits over several waves, one
    split per slice; forward and backward against float64."""
    x = randn((b, h, n, d), dtype, seed=n + d)
    theta = make_theta(h, d, seed=d)
    kwargs = {} if config is None else {"config": config}
    run_both(lambda t: kgen.torch.lrpe_cosine(t, theta, act="softmax", dim=-2, **kwargs),
             lambda t: lrpe_reference(t, theta, act="softmax_seq"), x, dtype)


@gpu
@pytest.mark.usefixtures("kgen_library")
def test_three_dim_input_and_strided_views():
    """(b, n, d) with theta (1, d); x a strided slice of a wider tensor (scalar path)."""
    x = randn((2, 77, 96), torch.bfloat16, seed=1)[:, :, :80]
    theta = make_theta(1, 80, seed=2)
    run_both(lambda t: kgen.torch.lrpe_cosine(t, theta, offset=5),
             lambda t: lrpe_reference(t[:, None], theta, offset=5)[:, 0], x, torch.bfloat16)


@gpu
@pytest.mark.usefixtures("kgen_library")
def test_library_errors_name_the_argument():
    x = randn((1, 2, 16, 32), torch.float16, seed=3)
    with pytest.raises(kgen.KgenError, match="^theta:"):
        kgen.torch.lrpe_cosine(x, make_theta(3, 32, seed=1))  # 3 rows for 2 heads
    with pytest.raises(kgen.KgenError, match="^grid:"):
        kgen.torch.md_lrpe_cosine(x, make_theta(2, 32, seed=1), shape=(3, 5))  # 15 != 16
    with pytest.raises(kgen.KgenError, match="^offset:"):
        kgen.torch.lrpe_cosine(x, make_theta(2, 32, seed=1), offset=1 << 24)
    with pytest.raises(kgen.KgenError, match="^config:"):
        kgen.torch.lrpe_cosine(x, make_theta(2, 32, seed=1), act="softmax", dim=-2, config="sp:t256:r4:v8")
