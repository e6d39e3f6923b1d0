"""kgen.torch's fast host path without a GPU: CPU tensors stand for device memory, the fast path's
test lets them through, and a stand-in library records what each C call receives. Each call of
attention's forward, backward and double backward is one C call whose descriptors are its
tensors' (the (b, h, n, d) views, the forward's o and lse in the backward's), later steps reuse
their call forms, and an expanded gradient is passed as a copy."""
import ctypes
import threading

import pytest

torch = pytest.importorskip("torch")

import kgen.torch  # noqa: E402
from kgen import _calls, _lib  # noqa: E402


def view(t, swap):
    """(data pointer, shape, strides, dtype bits) the library should see for `t`."""
    v = t.transpose(1, 2) if swap and t.dim() == 4 else t
    return v.data_ptr(), tuple(v.shape), v.stride(), v.element_size() * 8


@pytest.fixture
def calls(monkeypatch):
    """[(C function, [descriptor or None per tensor argument])] of every call; outputs are
    zero-filled, scratch sizes answered 64 bytes. The fast path takes CPU tensors. A packed call's
    descriptors end with its sequences: (cu_seqlens_q's, cu_seqlens_k's, max_seqlen_q,
    max_seqlen_k) and whether it passed a variant."""
    recorded = []
    tensor_args = {"kgen_attention_forward": 5, "kgen_attention_backward": 9, "kgen_attention_double_backward": 13,
                   "kgen_attention_varlen_forward": 5, "kgen_attention_varlen_backward": 9,
                   "kgen_attention_varlen_double_backward": 13}

    def describe(address):
        t = _lib.DLTensor.from_address(address)
        return t.data, tuple(t.shape[:t.ndim]), tuple(t.strides[:t.ndim]), t.dtype.bits

    def stand_in(name):
        def function(*args):
            if name.endswith("workspace_bytes"):
                ctypes.cast(args[-1], ctypes.POINTER(ctypes.c_size_t))[0] = 64
                return 0
            n = tensor_args[name]
            descriptors = [None if a is None else describe(a) for a in args[:n]]
            recorded.append((name, descriptors))
            outputs = descriptors[{"forward": 3, "backward": 6}.get(name.rsplit("_", 1)[1], 9):]
            if "varlen" in name:
                packed = _lib.PackedSequences.from_address(args[n + 1])
                descriptors.append((describe(packed.cu_seqlens_q), describe(packed.cu_seqlens_k), packed.max_seqlen_q,
                                    packed.max_seqlen_k, args[n + 2] is not None))
            for d in outputs:
                if d is not None:  # the outputs
                    extent = 1 + sum((n - 1) * s for n, s in zip(d[1], d[2]))
                    ctypes.memset(d[0], 0, extent * d[3] // 8)
            return 0
        return function

    monkeypatch.setattr(_lib, "function", stand_in)
    monkeypatch.setattr(_calls, "_forms", threading.local())
    monkeypatch.setattr(kgen.torch, "_eager", lambda t: type(t) is torch.Tensor and not kgen.torch._dispatch_modes())
    monkeypatch.setattr(kgen.torch, "_direct", lambda q, k, v: (type(q) is type(k) is type(v) is torch.Tensor and
                                                               not kgen.torch._dispatch_modes()))
    return recorded


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_forward_backward_and_double_backward_are_one_call_each(calls, layout):
    swap = layout == "bnhd"
    shape = (2, 7, 4, 16) if swap else (2, 4, 7, 16)
    kv_shape = (2, 9, 2, 16) if swap else (2, 2, 9, 16)
    q, k, v = (torch.randn(s, dtype=torch.bfloat16, requires_grad=True) for s in (shape, kv_shape, kv_shape))
    d_o = torch.randn(shape, dtype=torch.bfloat16, requires_grad=True)
    cotangents = [torch.randn_like(t) for t in (q, k, v)]
    for step in range(5):
        del calls[:]
        o = kgen.torch.attention(q, k, v, causal=True, layout=layout, scale=0.25)
        grads = torch.autograd.grad(o, (q, k, v), d_o, create_graph=True)
        second = torch.autograd.grad(grads, (q, k, v, d_o), cotangents)
        assert [name for name, _ in calls] == ["kgen_attention_forward", "kgen_attention_backward",
                                               "kgen_attention_double_backward"]
        forward, backward, double = (descriptors for _, descriptors in calls)
        assert forward[:3] == [view(t, swap) for t in (q, k, v)]
        assert forward[3] == view(o, swap) and forward[4][1] == (2, 4, 7)
        assert backward[:5] == forward  # q, k, v, o and lse: the forward's
        assert backward[5] == view(d_o, swap)
        assert backward[6:] == [view(t, swap) for t in grads]
        assert double[:6] == backward[:6]
        assert double[6:9] == [view(t, swap) for t in cotangents]
        assert double[9:] == [view(t, swap) for t in second]
        if step == 0:  # autograd's forward builds its form on the first call
            forms = len(_calls._cache())
        assert len(_calls._cache()) == forms  # later steps reuse the forms


def test_packed_batches_are_one_call_each_with_this_batchs_sequences(calls):
    """A packed batch's forward and backward are one C call each, without a variant, whose
    sequences are this batch's (their count and longest lengths change from batch to batch, the
    forms stay); create_graph runs the operators' backward, whose double backward is kgen's."""
    total, h, d = 24, 4, 16
    q, k, v = (torch.randn(total, h, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    d_o = torch.randn(total, h, d, dtype=torch.bfloat16)
    batches = [([0, 5, 5, 24], 19), ([0, 24], 24), ([0, 3, 10, 11, 20], 9)]
    for step in range(2):
        for starts, longest in batches:
            cu_q, cu_k = (torch.tensor(starts, dtype=torch.int32) for _ in range(2))
            sequences = (view(cu_q, False), view(cu_k, False), longest, longest - 1, False)
            del calls[:]
            o = kgen.torch.varlen_attention(q, k, v, cu_q, cu_k, longest, longest - 1, causal=True, scale=0.5)
            grads = torch.autograd.grad(o, (q, k, v), d_o)
            assert [name for name, _ in calls] == ["kgen_attention_varlen_forward", "kgen_attention_varlen_backward"]
            forward, backward = (descriptors for _, descriptors in calls)
            assert forward[:4] == [view(t, False) for t in (q, k, v, o)] and forward[4][1] == (h, total)
            assert forward[5] == sequences and backward[9] == sequences
            assert backward[:5] == forward[:5] and backward[5] == view(d_o, False)
            assert backward[6:9] == [view(t, False) for t in grads]
            o, lse = kgen.torch.varlen_attention(q.detach(), k, v, cu_q, cu_k, longest, longest - 1, return_lse=True)
            assert calls[-1][1][:5] == [view(t, False) for t in (q, k, v, o, lse)] and lse.shape == (h, total)
            assert calls[-1][1][5] == sequences
            if step == 0 and starts is batches[0][0]:
                forms = len(_calls._cache())
            assert len(_calls._cache()) == forms  # the same forms for every batch
    del calls[:]
    o = kgen.torch.varlen_attention(q, k, v, cu_q, cu_k, longest, longest)
    grads = torch.autograd.grad(o, (q, k, v), d_o, create_graph=True)
    torch.autograd.grad(grads, (q, k, v), [torch.ones_like(t) for t in grads])
    assert [name for name, _ in calls] == ["kgen_attention_varlen_forward", "kgen_attention_varlen_backward",
                                           "kgen_attention_varlen_double_backward"]
    assert calls[1][1][9][4] and calls[1][1][6:9] == [view(t, False) for t in grads]  # the operator's call
    with pytest.raises(ValueError, match="max_seqlen_q must be an int from 0 to 2\\^31 - 1"):
        kgen.torch.varlen_attention(q, k, v, cu_q, cu_k, 1 << 31, longest)


def test_plain_backward_and_an_expanded_gradient(calls):
    q, k, v = (torch.randn(1, 3, 5, 8, dtype=torch.float16, requires_grad=True) for _ in range(3))
    o = kgen.torch.attention(q, k, v)
    o.sum().backward()  # d_o: an expanded (zero-stride) ones tensor, passed as a dense copy
    name, descriptors = calls[-1]
    assert name == "kgen_attention_backward"
    assert descriptors[5][1:] == ((1, 3, 5, 8), (120, 40, 8, 1), 16)
    assert [d[0] for d in descriptors[6:]] == [t.grad.data_ptr() for t in (q, k, v)]
    d_o = torch.randn(1, 3, 8, 5, dtype=torch.float16).transpose(2, 3)  # a strided d_o: another form
    o = kgen.torch.attention(q, k, v)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    name, descriptors = calls[-1]
    assert descriptors[5][1:] == view(d_o.contiguous(), False)[1:] and descriptors[6] == view(grads[0], False)


def test_the_fast_forward_allocates_like_the_checked_one(calls):
    q, k, v = torch.randn(2, 300, 3, 4, 16).bfloat16().unbind(2)  # packed BNHD views
    o, lse = kgen.torch.attention_forward(q, k, v, layout="bnhd", return_lse=True)
    assert o.shape == q.shape and o.is_contiguous() and lse.shape == (2, 4, 300) and lse.dtype == torch.float32
    assert calls[-1][1] == [view(t, True) for t in (q, k, v, o, lse)]
    o = kgen.torch.attention_forward(q, k, v, layout="bnhd")
    assert calls[-1][1][4] is None and calls[-1][1][3] == view(o, True)
    out, lse = torch.empty_like(q), torch.empty(2, 4, 300)
    for _ in range(3):  # packed once, then the form built and reused
        result = kgen.torch.attention_forward(q, k, v, layout="bnhd", out=out, lse=lse, return_lse=True)
        assert result[0] is out and result[1] is lse
        assert calls[-1][1] == [view(t, True) for t in (q, k, v, out, lse)]
    assert kgen.torch.attention_forward(q, k, v, layout="bnhd", out=out) is out and calls[-1][1][4] is None
    o, lse = kgen.torch.attention_forward(q, k, v, layout="bnhd", out=out, return_lse=True)  # lse allocated
    assert o is out and calls[-1][1][4] == view(lse, False)
    with pytest.raises(ValueError, match="layout must be one of"):
        kgen.torch.attention_forward(q, k, v, layout="nhbd")
    with pytest.raises(ValueError, match="scale must be positive"):
        kgen.torch.attention(q, k, v, scale=-1.0)


def test_the_fast_path_test():
    """Autocast, dispatch modes and tensors other than plain strided ones take the checked path."""
    if not torch.cuda.is_available():
        q = torch.empty(1, 2, 3, 4)
        assert not kgen.torch._direct(q, q, q)  # not on a CUDA device
    meta = torch.empty(1, 2, 3, 4, device="meta")
    assert not kgen.torch._direct(meta, meta, meta)
    sparse = torch.empty(1, 2, 3, 4).to_sparse()
    assert not kgen.torch._direct(sparse, sparse, sparse)
    with pytest.raises(TypeError, match="q must be a strided"):
        kgen.torch.attention(sparse, sparse, sparse)


def test_functorch_transforms_take_the_regular_apply(calls):
    """Under a functorch transform the Functions go through torch.autograd.Function.apply, which
    refuses them as before (they define no setup_context)."""
    q, k, v = (torch.randn(1, 2, 3, 8) for _ in range(3))
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda q_: kgen.torch.attention(q_, k, v).sum())(q)


def test_autocast_in_the_inputs_dtype_keeps_the_fast_path(monkeypatch):
    """Under autocast, q, k and v already in its dtype take the fast path (it would cast nothing);
    another dtype takes the checked path, which casts."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))  # CPU tensors stand for device ones
    enabled, dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        q = torch.empty(1, 2, 3, 8, dtype=torch.bfloat16)
        assert kgen.torch._direct(q, q, q)
        assert not kgen.torch._direct(q, q.float(), q)
    finally:
        torch.set_autocast_enabled("cuda", enabled)
        torch.set_autocast_dtype("cuda", dtype)
    assert kgen.torch._direct(q, q.float(), q)  # autocast off: any dtypes (the library checks them)
