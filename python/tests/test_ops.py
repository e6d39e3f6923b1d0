"""torch.ops.kgen.* without a GPU: the registrations, the fake kernels' shapes, dtypes, strides and
errors (FakeTensorMode on CUDA tensors, meta tensors), and torch.compile(fullgraph=True) tracing
kgen.torch's forward and backward on meta tensors with no graph break."""
import threading

import pytest

torch = pytest.importorskip("torch")

import kgen  # noqa: E402
import kgen.torch  # noqa: E402
from conftest import StandInMode  # noqa: E402
from kgen.testing import AttentionBlock  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

OPS = ["attention_forward", "attention_forward_out", "attention_backward", "attention_backward_out",
       "attention_double_backward", "lrpe_cosine_forward", "lrpe_cosine_backward", "md_lrpe_cosine_forward",
       "md_lrpe_cosine_forward_cached", "md_lrpe_cosine_backward"]
AUTOCAST = {"attention_forward", "lrpe_cosine_forward", "md_lrpe_cosine_forward", "md_lrpe_cosine_forward_cached"}


@pytest.mark.parametrize("name", OPS)
def test_operator_is_registered(name):
    qualname = f"kgen::{name}"
    for key in ("CUDA", "CPU", "Meta"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key), f"{qualname} has no {key} kernel"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "AutocastCUDA") == (name in AUTOCAST)
    # autograd lives in kgen.torch's Functions, outside the operator
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "AutogradCUDA")
    assert torch.ops.kgen.__getattr__(name).default._schema.name == qualname


def cuda(shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="cuda")


def layout_shape(b, h, n, d, layout):
    return (b, n, h, d) if layout == "bnhd" else (b, h, n, d)


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fake_attention_outputs(layout, dtype):
    with FakeTensorMode():
        q = cuda(layout_shape(2, 8, 100, 64, layout), dtype)
        k = cuda(layout_shape(2, 2, 120, 64, layout), dtype)
        o, lse = torch.ops.kgen.attention_forward(q, k, k, None, True, layout)
        assert (o.shape, o.dtype, o.stride(), o.device) == (q.shape, dtype, q.stride(), q.device)
        assert (lse.shape, lse.dtype, lse.stride()) == ((2, 8, 100), torch.float32, (800, 100, 1))
        dq, dk, dv = torch.ops.kgen.attention_backward(q, k, k, o, lse, o, 0.125, True, layout, True, None)
        assert [(t.shape, t.dtype) for t in (dq, dk, dv)] == [(q.shape, dtype), (k.shape, dtype), (k.shape, dtype)]
        outs = torch.ops.kgen.attention_double_backward(q, k, k, o, lse, o, None, k, None, None, False, layout)
        assert [t.shape for t in outs] == [q.shape, k.shape, k.shape, q.shape]
        # the public API on fake tensors goes through the operators
        o2, lse2 = kgen.torch.attention_forward(q, k, k, layout=layout, return_lse=True)
        assert o2.shape == q.shape and lse2.shape == (2, 8, 100)
        out = torch.empty_like(q)
        assert kgen.torch.attention_forward(q, k, k, layout=layout, out=out) is out


def test_fake_attention_keeps_strides_of_packed_qkv():
    with FakeTensorMode():
        q, k, v = cuda((2, 300, 3, 4, 64)).unbind(2)  # BNHD views with a 3·h·d row stride
        o, lse = torch.ops.kgen.attention_forward(q, k, v, None, True, "bnhd")
        assert o.shape == q.shape and o.is_contiguous()
        dq, dk, dv = torch.ops.kgen.attention_backward(q, k, v, o, lse, o, None, True, "bnhd")
        assert dq.shape == q.shape and dq.stride() == torch.empty_like(q).stride()


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_fake_lrpe_outputs(layout):
    with FakeTensorMode():
        x = cuda(layout_shape(2, 4, 33, 48, layout), torch.float16)
        theta = cuda((4, 48), torch.float32)
        o = torch.ops.kgen.lrpe_cosine_forward(x, theta, 5, "softmax_seq", layout)
        assert (o.shape, o.dtype) == ((*x.shape[:-1], 96), torch.float16)
        assert torch.ops.kgen.lrpe_cosine_backward(x, theta, o, 5, "softmax_seq", layout).shape == x.shape
        o, angles = torch.ops.kgen.md_lrpe_cosine_forward_cached(x, theta[:, :24], [3, 11], 0, "silu", layout)
        assert (angles.shape, angles.dtype) == ((4, 33, 48), torch.float32) and angles.is_contiguous()
        dx = torch.ops.kgen.md_lrpe_cosine_backward(x, theta[:, :24], o, angles, [3, 11], 0, "silu", layout)
        assert dx.shape == x.shape
        assert kgen.torch.md_lrpe_cosine(x, theta[:, :24], (3, 11), layout=layout).shape == o.shape
        x3 = cuda((2, 33, 48))
        assert kgen.torch.lrpe_cosine(x3, theta[0]).shape == (2, 33, 96)


def expect_error(pattern, fn, error=kgen.KgenError):
    with pytest.raises(error, match=pattern) as e:
        fn()
    if error is kgen.KgenError:
        assert e.value.status == kgen.Status.INVALID_ARGUMENT
    return e


def test_fake_errors_name_the_argument():
    """The library's sentences, on the (b, h, n, d) views of bnhd tensors, at trace time."""
    with FakeTensorMode():
        q = cuda((2, 100, 8, 64))
        k3 = cuda((2, 120, 3, 64))
        f = kgen.torch.attention_forward
        expect_error(r"^k: heads_kv=3 does not divide q's heads=8$", lambda: f(q, k3, k3, layout="bnhd"))
        expect_error(r"^k: shape \(2, 2, 120, 32\) does not match q \(2, 8, 100, 64\) in batch or head_dim$",
                     lambda: f(q, cuda((2, 120, 2, 32)), cuda((2, 120, 2, 32)), layout="bnhd"))
        expect_error(r"^q: expected 4 dimensions, got 3 \(100, 8, 64\)$", lambda: f(q[0], k3, k3, layout="bnhd"))
        expect_error(r"^k: dtype fp16 differs from q's bf16$", lambda: f(q, k3.half(), k3, layout="bnhd"))
        expect_error(r"^q: dtype \(code 2, 64 bits\) is not float16, bfloat16 or float32$",
                     lambda: f(q.double(), k3, k3, layout="bnhd"))
        k = cuda((2, 120, 2, 64))
        o, lse = torch.ops.kgen.attention_forward(q, k, k, None, False, "bnhd")
        expect_error(r"^d_o: shape \(2, 8, 100, 32\) differs from q \(2, 8, 100, 64\)$",
                     lambda: kgen.torch.attention_backward(q, k, k, o, lse, q[..., :32], layout="bnhd"))
        expect_error(r"^gk: shape", lambda: kgen.torch.attention_double_backward(q, k, k, o, lse, o, None, q, None,
                                                                                 layout="bnhd"))
        x, theta = cuda((1, 2, 16, 32), torch.float16), cuda((3, 32), torch.float32)
        expect_error(r"^theta: shape \(3, 32\) must have 1 or heads=2 rows$", lambda: kgen.torch.lrpe_cosine(x, theta))
        expect_error(r"^grid: l \+ Π grid = 0 \+ 3×5 must equal x's n=16$",
                     lambda: kgen.torch.md_lrpe_cosine(x, theta[:2], shape=(3, 5)))
        expect_error(r"^offset:", lambda: kgen.torch.lrpe_cosine(x, theta[:2], offset=1 << 24))
        expect_error("layout must be one of", lambda: f(q, k, k, layout="nhd"), ValueError)
        expect_error("scale must be positive", lambda: f(q, k, k, scale=0.0), ValueError)
        expect_error("act must be one of", lambda: torch.ops.kgen.lrpe_cosine_forward(x, theta[:2], 0, "gelu"),
                     ValueError)


def test_fake_device_mismatch():
    with FakeTensorMode():
        q = cuda((1, 2, 16, 64))
        try:
            k = torch.empty((1, 2, 16, 64), dtype=torch.bfloat16, device="cuda:1")
        except (RuntimeError, AssertionError):
            pytest.skip("this PyTorch makes no fake tensor on cuda:1 without a GPU")
        expect_error(r"^k: on device 1, q is on device 0$", lambda: kgen.torch.attention_forward(q, k, k))


def test_cpu_fake_tensors_are_refused_as_the_library_does():
    with FakeTensorMode():
        q = torch.empty((1, 2, 16, 64), dtype=torch.bfloat16)
        expect_error(r"^q: tensor is not in CUDA device memory \(DLPack device type 1\)$",
                     lambda: torch.ops.kgen.attention_forward(q, q, q))


@pytest.fixture
def cuda_autocast_bf16():
    """Autocast on "cuda" in bfloat16, set directly: torch.autocast("cuda") turns itself off
    without a GPU."""
    enabled, dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    yield
    torch.set_autocast_enabled("cuda", enabled)
    torch.set_autocast_dtype("cuda", dtype)


def test_autocast_casts_floating_inputs(cuda_autocast_bf16):
    with FakeTensorMode():
        q, x, theta = cuda((1, 2, 8, 64), torch.float32), cuda((1, 2, 8, 64), torch.float32), cuda((2, 64), torch.float32)
        o, lse = torch.ops.kgen.attention_forward(q, q, q)  # the operator's autocast kernel
        assert (o.dtype, lse.dtype) == (torch.bfloat16, torch.float32)
        assert kgen.torch.attention_forward(q, q, q).dtype == torch.bfloat16
        assert kgen.torch.attention(q, q.half(), q).dtype == torch.bfloat16
        assert torch.ops.kgen.lrpe_cosine_forward(x, theta).dtype == torch.bfloat16  # theta stays float32
        assert kgen.torch.lrpe_cosine(x, theta).dtype == torch.bfloat16
        assert kgen.torch.md_lrpe_cosine(x, theta[:, :32], (2, 4)).dtype == torch.bfloat16
        # the backward operators have no autocast kernel: they run in the dtypes their forward left
        assert torch.ops.kgen.attention_backward(q, q, q, q, lse, q)[0].dtype == torch.float32
        expect_error(r"^q: dtype \(code 2, 64 bits\)", lambda: kgen.torch.attention_forward(*(q.double(),) * 3))


def test_no_autocast_keeps_dtypes():
    with FakeTensorMode():
        q = cuda((1, 2, 8, 64), torch.float32)
        assert kgen.torch.attention_forward(q, q, q).dtype == torch.float32
        assert torch.ops.kgen.attention_forward(q, q, q)[0].dtype == torch.float32


# --- torch.compile on meta tensors --------------------------------------------------------------------

class GraphRecorder:
    """A torch.compile backend (through aot_autograd) that keeps the forward and backward graphs."""

    def __init__(self):
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func
        self.boxed = make_boxed_func
        self.graphs = {"forward": [], "backward": []}
        self.backend = aot_autograd(fw_compiler=self.keep("forward"), bw_compiler=self.keep("backward"))

    def keep(self, kind):
        def compiler(gm, example_inputs):
            self.graphs[kind].append(gm)
            return self.boxed(gm.forward)
        return compiler

    def targets(self, kind):
        return {str(node.target) for gm in self.graphs[kind] for node in gm.graph.nodes if node.op == "call_function"}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_traces_forward_and_backward(backend):
    torch._dynamo.reset()
    model = AttentionBlock(64, 2).to("meta")
    x = torch.empty(2, 16, 64, device="meta", requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    y = compiled(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad.shape == x.shape and model.qkv.weight.grad.shape == model.qkv.weight.shape


def test_compiled_graphs_hold_the_kgen_operators():
    torch._dynamo.reset()
    recorder = GraphRecorder()
    model = AttentionBlock(64, 2).to("meta")
    x = torch.empty(2, 16, 64, device="meta", requires_grad=True)
    torch.compile(model, fullgraph=True, backend=recorder.backend)(x).sum().backward()
    assert len(recorder.graphs["forward"]) == 1 and len(recorder.graphs["backward"]) == 1
    forward, backward = recorder.targets("forward"), recorder.targets("backward")
    assert {"kgen.attention_forward.default", "kgen.lrpe_cosine_forward.default"} <= forward, forward
    assert {"kgen.attention_backward.default", "kgen.lrpe_cosine_backward.default"} <= backward, backward
    assert not any("double_backward" in t for t in forward | backward)


def test_compile_reports_the_library_message_at_trace_time():
    torch._dynamo.reset()

    def f(q, k, v):
        return kgen.torch.attention(q, k, v, causal=True)

    q = torch.empty(1, 8, 16, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(1, 3, 16, 64, device="meta", dtype=torch.bfloat16)
    with pytest.raises(Exception, match="k: heads_kv=3 does not divide q's heads=8"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, k)


def test_eager_fast_path_is_off_when_traced_or_fake():
    q = torch.empty(1, 2, 3, 4)
    assert not kgen.torch._eager(q)  # a CPU tensor goes to the operator (whose CPU kernel reports the library's error)
    assert not kgen.torch._eager(torch.empty(1, device="meta"))
    with FakeTensorMode():
        assert not kgen.torch._eager(cuda((1, 2, 3, 4)))


# --- opcheck on the CPU, with a stand-in for the library --------------------------------------------

OUTPUTS = {  # C function: positions of the tensors it writes
    "kgen_attention_forward": (3, 4), "kgen_attention_backward": (6, 7, 8),
    "kgen_attention_double_backward": (9, 10, 11, 12), "kgen_lrpe_cosine_forward": (2,),
    "kgen_lrpe_cosine_backward": (3,), "kgen_md_lrpe_cosine_forward": (2, 3), "kgen_md_lrpe_cosine_backward": (3,),
}


_STAND_IN_MODE = StandInMode()


def stand_in(name):
    """A C function of the library's signature that zero-fills the memory of each output descriptor
    (or answers 64 bytes of scratch): it reads back what the kernels packed. A validate-only call
    (the fake kernels') returns OK."""
    import ctypes

    if name == "kgen_validate_only":
        return _STAND_IN_MODE

    def function(*args):
        if _STAND_IN_MODE.on:
            return 0
        if name.endswith("workspace_bytes"):
            ctypes.cast(args[-1], ctypes.POINTER(ctypes.c_size_t))[0] = 64
            return 0
        for i in OUTPUTS[name]:
            if args[i] is None:
                continue
            t = kgen._lib.DLTensor.from_address(args[i])
            extent = 1 + sum((t.shape[j] - 1) * t.strides[j] for j in range(t.ndim))
            ctypes.memset(t.data, 0, extent * t.dtype.bits // 8)
        return 0
    return function


@pytest.fixture
def library_stand_in(monkeypatch):
    """CPU tensors run the kernels against `stand_in`, and the fake kernels take CPU tensors for
    device memory."""
    from kgen import _checks, _kernels, _lib
    monkeypatch.setattr(_lib, "function", stand_in)
    monkeypatch.setattr(_kernels._calls, "_forms", threading.local())  # keep the stand-in's sizes out of later tests
    device = _checks.dl_device
    monkeypatch.setattr(_checks, "dl_device", lambda d: (_lib.kDLCUDA, 0) if d.type == "cpu" else device(d))


def cpu_opcheck_cases():
    ops = torch.ops.kgen
    cases = []
    for layout in ("bhnd", "bnhd"):
        def t(b, h, n, d, dtype=torch.bfloat16):
            return torch.randn(layout_shape(b, h, n, d, layout)).to(dtype)
        q, k, v, d_o = t(2, 4, 7, 16), t(2, 2, 9, 16), t(2, 2, 9, 16), t(2, 4, 7, 16)
        lse = torch.randn(2, 4, 7)
        grad = (None, True, layout, True, None)
        x, th, do_x = t(2, 3, 12, 8), torch.rand(3, 8), t(2, 3, 12, 16)
        angles = torch.rand(3, 12, 8)
        cases += [
            (ops.attention_forward, (q, k, v, 0.5, True, layout)),
            (ops.attention_forward_out, (q, k, v, torch.empty_like(q), torch.empty(2, 4, 7), None, False, layout)),
            (ops.attention_forward_out, (q, k, v, torch.empty_like(q), None, None, False, layout)),
            (ops.attention_backward, (q, k, v, q, lse, d_o, *grad)),
            (ops.attention_backward_out, (q, k, v, q, lse, d_o, torch.empty_like(q), torch.empty_like(k),
                                          torch.empty_like(v), *grad)),
            (ops.attention_double_backward, (q, k, v, q, lse, d_o, None, k, v, *grad)),
            (ops.lrpe_cosine_forward, (x, th, 3, "softmax_seq", layout, None)),
            (ops.lrpe_cosine_backward, (x, th, do_x, 3, "silu", layout, None)),
            (ops.md_lrpe_cosine_forward, (x, th[:, :4], [3, 4], 0, "relu", layout, None)),
            (ops.md_lrpe_cosine_forward_cached, (x, th[:, :4], [2, 5], 2, "none", layout, None)),
            (ops.md_lrpe_cosine_backward, (x, th[:, :4], do_x, angles, [3, 4], 0, "silu", layout, None)),
            (ops.md_lrpe_cosine_backward, (x, th[:, :4], do_x, None, [3, 4], 0, "silu", layout, None)),
        ]
    return cases


@pytest.mark.parametrize("case", range(24))
def test_opcheck_with_a_stand_in_library(library_stand_in, case):
    """Schema (mutations, aliasing), fake kernels against the kernels' outputs (shapes, strides,
    dtypes), and aot_autograd dispatch with static and dynamic shapes; the numbers come from the GPU
    test of the same name in test_ops_gpu.py."""
    op, args = cpu_opcheck_cases()[case]
    torch.library.opcheck(op, args)


def test_kernels_pass_the_library_logical_views(monkeypatch):
    """What the C function receives: each tensor's (b, h, n, ·) view in place (bnhd swapped, 3-d
    and 2-d tensors as given), NULL for an absent one, and the options."""
    from kgen import _kernels, _lib
    calls = []

    def recorder(name):
        def function(*args):
            descriptors = []
            for a in args[:-2]:
                if a is None:
                    descriptors.append(None)
                    continue
                t = _lib.DLTensor.from_address(a)
                descriptors.append((t.data, tuple(t.shape[:t.ndim]), tuple(t.strides[:t.ndim]),
                                    (t.dtype.code, t.dtype.bits), t.device.device_type))
            calls.append((name, descriptors, args[-2]))
            return 0
        return function

    monkeypatch.setattr(_lib, "function", recorder)
    monkeypatch.setattr(_kernels._calls, "_forms", threading.local())

    def expected(t, swap=False):
        v = t.transpose(1, 2) if swap and t.dim() == 4 else t
        return (v.data_ptr(), tuple(v.shape), v.stride(), _kernels._checks.dl_dtype(v.dtype), _lib.kDLCPU)

    q, k, v = torch.randn(2, 300, 3, 4, 16).bfloat16().unbind(2)  # packed BNHD views
    o, lse = _kernels.attention_forward(q, k, v, 0.25, True, "bnhd")
    name, descriptors, options = calls[-1]
    assert name == "kgen_attention_forward"
    assert descriptors == [expected(t, True) for t in (q, k, v, o, lse)]
    assert lse.shape == (2, 4, 300) and o.shape == q.shape and o.is_contiguous()
    assert _lib.AttentionOptions.from_address(options).scale == 0.25
    assert _lib.AttentionOptions.from_address(options).causal == 1

    d_o = torch.randn(1, 1, 1, 1).bfloat16().expand(q.shape)  # an expanded gradient: passed as a copy
    outs = _kernels.attention_double_backward(q, k, v, o, lse, d_o, None, k, None, None, False, "bnhd", True, "x:y")
    name, descriptors, options = calls[-1]
    assert name == "kgen_attention_double_backward"
    assert descriptors[6] is None and descriptors[8] is None and descriptors[7] == expected(k, True)
    assert descriptors[5][2] == d_o.contiguous().transpose(1, 2).stride()
    assert descriptors[9:] == [expected(t, True) for t in outs]
    opts = _lib.AttentionBackwardOptions.from_address(options)
    assert (opts.scale, opts.causal, opts.deterministic, opts.config) == (0.0, 0, 1, b"x:y")
    assert opts.workspace_bytes == 0 and opts.workspace  # the recorder answers 0 bytes; one byte is passed

    # bhnd: the views as given (the paged and query paths' descriptors are PyTorch's own DLPack export)
    assert _kernels._EXPORTS_DLTENSORS, "this PyTorch's to_dlpack is not read: every call packs its descriptors"
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    o, lse = _kernels.attention_forward(q, k, v, None, False, "bhnd")
    name, descriptors, options = calls[-1]
    assert descriptors == [expected(t) for t in (q, k, v, o, lse)]
    outs = _kernels.attention_backward(q, k, v, o, lse, o, None, True, "bhnd", False, None)
    assert calls[-1][1] == [expected(t) for t in (q, k, v, o, lse, o, *outs)]
    assert _lib.AttentionBackwardOptions.from_address(calls[-1][2]).causal == 1

    x, theta = torch.randn(2, 77, 48).half(), torch.rand(1, 48)
    o = _kernels.lrpe_cosine_forward(x, theta, 5, "silu", "bnhd", None)
    name, descriptors, options = calls[-1]
    assert descriptors == [expected(t) for t in (x, theta, o)]
    lrpe = _lib.LrpeOptions.from_address(options)
    assert (lrpe.act, lrpe.offset, lrpe.dims) == (_lib.LRPE_ACTS["silu"], 5, 0)
    x = torch.randn(2, 35, 3, 48).half()
    _kernels.md_lrpe_cosine_forward_cached(x, theta[:, :24], [5, 6], 5, "none", "bnhd", None)
    name, descriptors, options = calls[-1]
    assert descriptors[0] == expected(x, True) and descriptors[3][1:3] == ((3, 35, 48), (35 * 48, 48, 1))
    lrpe = _lib.LrpeOptions.from_address(options)
    assert (lrpe.dims, list(lrpe.grid), lrpe.extra) == (2, [5, 6, 0], 5)
