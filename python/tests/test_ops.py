"""torch.ops.kgen.* without a GPU: the registrations, the fake kernels' shapes, dtypes, strides and
errors (FakeTensorMode on CUDA tensors, meta tensors), and torch.compile(fullgraph=True) tracing
kgen.torch's forward and backward on meta tensors with no graph break."""
import pytest

torch = pytest.importorskip("torch")

import kgen  # noqa: E402
import kgen.torch  # noqa: E402
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


# --- torch.compile on meta tensors --------------------------------------------------------------------

class Block(torch.nn.Module):
    """qkv projection, LRPE on q and k, attention (causal, GQA-free, bnhd) and an output projection."""

    def __init__(self, d_model=64, heads=2):
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(2 * d_model, d_model)
        self.register_buffer("theta", 10000.0 ** (-torch.arange(self.head_dim) / self.head_dim))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).unbind(2)
        q = kgen.torch.lrpe_cosine(q, self.theta, layout="bnhd", act="silu")
        k = kgen.torch.lrpe_cosine(k, self.theta, layout="bnhd", act="silu")
        v = torch.cat([v, v], dim=-1)
        o = kgen.torch.attention(q, k, v, causal=True, layout="bnhd")
        return self.out(o.reshape(b, n, -1))


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
    model = Block().to("meta")
    x = torch.empty(2, 16, 64, device="meta", requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    y = compiled(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad.shape == x.shape and model.qkv.weight.grad.shape == model.qkv.weight.shape


def test_compiled_graphs_hold_the_kgen_operators():
    torch._dynamo.reset()
    recorder = GraphRecorder()
    model = Block().to("meta")
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
