"""Attention variants without a GPU: the C API's checks through ctypes (kgen_attention_variant,
kgen_attention_forward_variant), the fake kernel's sentences against the library's own, the
keyword arguments of kgen.torch, the operators' registration, fake outputs, torch.compile tracing
and opcheck against a stand-in library. Descriptors claim device memory on a device index no
machine has: the library validates (and parses the expressions) before any device work, so a
call that passes validation fails at the device query instead of launching anything."""
import ctypes

import pytest

from kgen import KgenError, Status, _lib

try:
    import torch
except ImportError:  # the C API's tests run without PyTorch
    torch = None
else:
    import kgen.torch
    from kgen import _checks, _kernels
    from torch._subclasses.fake_tensor import FakeTensorMode

pytestmark = pytest.mark.usefixtures("kgen_library")
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

NO_SUCH_DEVICE = 4096
ADDRESS = 1 << 20
BF16, F32, I32, I64 = (_lib.kDLBfloat, 16), (_lib.kDLFloat, 32), (_lib.kDLInt, 32), (_lib.kDLInt, 64)


def descriptor(shape, dtype=BF16, strides=None):
    if strides is None:
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
    return _lib.dltensor(ADDRESS, shape, strides, dtype, (_lib.kDLCUDA, NO_SUCH_DEVICE))


Q, KV, LSE = (2, 8, 100, 64), (2, 2, 120, 64), (2, 8, 100)


def forward(variant, q=Q, dtype=BF16):
    """(status, message) of kgen_attention_forward_variant on a valid (q, k, v, o, lse)."""
    tensors = [descriptor(q, dtype), descriptor(KV, dtype), descriptor(KV, dtype), descriptor(q, dtype),
               descriptor(LSE, F32)]
    options = _lib.AttentionOptions(scale=0.0, causal=0)
    status = _lib.function("kgen_attention_forward_variant")(
        *map(ctypes.byref, tensors), ctypes.byref(options), None if variant is None else ctypes.byref(variant), None)
    return status, _lib.last_error()


def refused(variant, **kwargs):
    status, message = forward(variant, **kwargs)
    assert status == Status.INVALID_ARGUMENT, f"status {status}: {message}"
    return message


def passes_validation(variant):
    """The call got past every argument check: it fails only where it needs a device."""
    status, message = forward(variant)
    assert status not in (Status.OK, Status.INVALID_ARGUMENT, Status.INTERNAL), f"status {status}: {message}"


# --- C API ------------------------------------------------------------------------------------------

def test_init_gives_plain_attention():
    c = _lib.AttentionVariant()
    ctypes.memset(ctypes.byref(c), 0x5a, ctypes.sizeof(c))
    _lib.function("kgen_attention_variant_init")(ctypes.byref(c))
    assert bytes(c) == bytes(_lib.AttentionVariant())
    assert (c.window_left, c.window_right, c.prefix, c.chunk, c.softcap, c.num_scalars) == (-1, -1, -1, 0, 0.0, 0)
    _lib.function("kgen_attention_variant_init")(None)  # NULL: nothing to do


def test_null_and_plain_variant_are_the_plain_call():
    tensors = [descriptor(Q), descriptor(KV), descriptor(KV), descriptor(Q), descriptor(LSE, F32)]
    options = _lib.AttentionOptions(scale=0.0, causal=1)
    plain = _lib.function("kgen_attention_forward")(*map(ctypes.byref, tensors), ctypes.byref(options), None)
    plain_message = _lib.last_error()
    assert forward(None) == forward(_lib.AttentionVariant()) == (plain, plain_message)


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="offsets are for 64-bit ABIs")
def test_struct_layouts():
    offsets = {name: getattr(_lib.AttentionVariant, name).offset for name, _ in _lib.AttentionVariant._fields_}
    assert offsets == {"causal_top_left": 0, "window_left": 4, "window_right": 8, "softcap": 16, "alibi_slopes": 24,
                       "prefix": 32, "chunk": 36, "document_ids": 40, "sinks": 48, "sinks_grad": 56,
                       "score_mod": 64, "mask_mod": 72, "scalars": 80, "num_scalars": 88, "tensors": 96,
                       "num_tensors": 104}
    assert ctypes.sizeof(_lib.AttentionVariant) == 112
    assert [_lib.VariantScalar.value.offset, _lib.VariantScalar.integer.offset, ctypes.sizeof(_lib.VariantScalar)] == \
        [8, 16, 24]
    assert [_lib.VariantTensor.tensor.offset, _lib.VariantTensor.learnable.offset, _lib.VariantTensor.grad.offset,
            ctypes.sizeof(_lib.VariantTensor)] == [8, 16, 24, 32]


def test_null_arrays_and_names_are_named():
    assert refused(_lib.AttentionVariant(num_scalars=2, score_mod=b"score")) == \
        "variant.scalars: NULL with num_scalars=2"
    assert refused(_lib.AttentionVariant(num_tensors=1, score_mod=b"score")) == \
        "variant.tensors: NULL with num_tensors=1"
    assert refused(_lib.AttentionVariant(num_scalars=-1)) == "variant.num_scalars: -1 is negative"
    scalars = (_lib.VariantScalar * 2)(_lib.VariantScalar(b"c", 2.0, 0), _lib.VariantScalar(None, 1.0, 1))
    assert refused(_lib.AttentionVariant(scalars=ctypes.addressof(scalars), num_scalars=2, score_mod=b"score * c")) == \
        "variant.scalars[1].name: NULL"
    tensors = (_lib.VariantTensor * 1)(_lib.VariantTensor(b"bias", None, 0, None))
    assert refused(_lib.AttentionVariant(tensors=ctypes.addressof(tensors), num_tensors=1,
                                         score_mod=b"score + bias[h]")) == \
        "variant.tensors[bias]: tensor descriptor is null"


def test_expressions_are_parsed_before_any_device_work():
    message = refused(_lib.AttentionVariant(score_mod=b"score + bais[h]"))
    assert message.startswith("score_mod, column 9: unknown name 'bais'"), message
    assert refused(_lib.AttentionVariant(mask_mod=b"q <= ")).startswith("mask_mod, column"), "mask_mod"
    passes_validation(_lib.AttentionVariant(score_mod=b"sigmoid(score) * score"))
    scalars = (_lib.VariantScalar * 1)(_lib.VariantScalar(b"c", 20.0, 0))
    bias = descriptor((8,), F32)
    tensors = (_lib.VariantTensor * 1)(_lib.VariantTensor(b"b2", ctypes.addressof(bias), 0, None))
    passes_validation(_lib.AttentionVariant(score_mod=b"tanh(score / c) * c + b2[h]", scalars=ctypes.addressof(scalars),
                                            num_scalars=1, tensors=ctypes.addressof(tensors), num_tensors=1))


def test_int32_only_for_variant_tensors():
    assert refused(None, dtype=I32) == "q: dtype (code 0, 32 bits) is not float16, bfloat16 or float32"
    docs = descriptor((2, 120), I32)
    passes_validation(_lib.AttentionVariant(document_ids=ctypes.addressof(docs)))
    docs64 = descriptor((2, 120), I64)
    assert refused(_lib.AttentionVariant(document_ids=ctypes.addressof(docs64))) == \
        "variant.document_ids: dtype (code 0, 64 bits) is not float16, bfloat16, float32 or int32"
    slopes = descriptor((8,), I32)
    assert refused(_lib.AttentionVariant(alibi_slopes=ctypes.addressof(slopes))) == \
        "variant.alibi_slopes: dtype (code 0, 32 bits) is not float16, bfloat16 or float32"
    doc = descriptor((2, 120), I32)
    tensors = (_lib.VariantTensor * 1)(_lib.VariantTensor(b"doc", ctypes.addressof(doc), 0, None))
    passes_validation(_lib.AttentionVariant(mask_mod=b"doc[b][q] == doc[b][k]", tensors=ctypes.addressof(tensors),
                                            num_tensors=1))


def test_presets_pass_validation():
    slopes, sinks = descriptor((8,), F32), descriptor((8,), F32)
    passes_validation(_lib.AttentionVariant(window_left=64, window_right=0, softcap=30.0,
                                            alibi_slopes=ctypes.addressof(slopes), sinks=ctypes.addressof(sinks)))
    passes_validation(_lib.AttentionVariant(causal_top_left=1, prefix=0, chunk=16))


# --- the fake kernel's sentences against the library's ------------------------------------------------

DL_DTYPES = {"bfloat16": BF16, "float32": F32, "int32": I32, "int64": I64, "float16": (_lib.kDLFloat, 16)}


def spec(shape, dtype="float32", strides=None):
    return (tuple(shape), dtype, strides)


def meta(s):
    shape, dtype, strides = s
    if strides is None:
        return torch.empty(shape, dtype=getattr(torch, dtype), device="meta")
    return torch.empty_strided(shape, strides, dtype=getattr(torch, dtype), device="meta")


def library_variant(fields: dict):
    """(kgen_attention_variant, what it refers to) of the Variant fields, tensors as specs."""
    keep = []

    def address(s):
        d = descriptor(s[0], DL_DTYPES[s[1]], s[2])
        keep.append(d)
        return ctypes.addressof(d)

    c = _lib.AttentionVariant()
    for name, value in fields.items():
        if name in ("alibi_slopes", "document_ids", "sinks"):
            setattr(c, name, address(value))
        elif name in ("score_mod", "mask_mod"):
            setattr(c, name, value.encode())
        elif name == "scalars":
            array = (_lib.VariantScalar * len(value))(*[_lib.VariantScalar(n.encode(), float(x), int(isinstance(x, int)))
                                                        for n, x in value.items()])
            keep.append(array)
            c.scalars, c.num_scalars = ctypes.addressof(array), len(array)
        elif name == "tensors":
            array = (_lib.VariantTensor * len(value))(*[_lib.VariantTensor(n.encode(), address(s), 0, None)
                                                        for n, s in value.items()])
            keep.append(array)
            c.tensors, c.num_tensors = ctypes.addressof(array), len(array)
        else:
            setattr(c, name, value)
    return c, keep


def python_variant(fields: dict):
    named = {}
    for name, value in fields.items():
        if name in ("alibi_slopes", "document_ids", "sinks"):
            named[name] = meta(value)
        elif name == "scalars":
            named.update(scalar_names=list(value), scalar_values=[float(x) for x in value.values()],
                         scalar_integer=[isinstance(x, int) for x in value.values()])
        elif name == "tensors":
            named.update(tensor_names=list(value), tensors=[meta(s) for s in value.values()])
        else:
            named[name] = value
    return _checks.Variant(**named)


VARIANT_CASES = {
    "window left -5": dict(window_left=-5, softcap=30.0),
    "window right -2 with left 3": dict(window_left=3, window_right=-2),
    "window left 2^30 + 1": dict(window_left=(1 << 30) + 1),
    "softcap negative": dict(softcap=-1.0),
    "softcap inf": dict(softcap=float("inf")),
    "alibi bf16": dict(alibi_slopes=spec((8,), "bfloat16")),
    "alibi int64": dict(alibi_slopes=spec((8,), "int64")),
    "alibi kv heads": dict(alibi_slopes=spec((2,))),
    "alibi 2-d": dict(alibi_slopes=spec((8, 1))),
    "prefix -2": dict(prefix=-2, softcap=30.0),
    "chunk -1": dict(chunk=-1),
    "document ids fp32": dict(document_ids=spec((2, 120))),
    "document ids int64": dict(document_ids=spec((2, 120), "int64")),
    "document ids n_q columns": dict(document_ids=spec((2, 100), "int32")),
    "document ids empty": dict(document_ids=spec((2, 0), "int32")),
    "sinks shape": dict(sinks=spec((16,))),
    "sinks strided": dict(sinks=spec((8,), "float32", (2,))),
    "scalar integer 2.5": dict(score_mod="score * c", scalars={"c": 2.5}, **{}),
    "scalar inf": dict(score_mod="score * c", scalars={"c": float("inf")}),
    "tensor fp16": dict(score_mod="score + t[h]", tensors={"t": spec((8,), "float16")}),
    "tensor int64": dict(score_mod="score + t[h]", tensors={"t": spec((8,), "int64")}),
    "tensor 5-d": dict(score_mod="score", tensors={"t": spec((1, 1, 1, 1, 8))}),
    "inputs without expressions": dict(scalars={"c": 1.0}),
    "alibi before sinks": dict(alibi_slopes=spec((3,)), sinks=spec((3,))),
}


@needs_torch
@pytest.mark.parametrize("case", VARIANT_CASES)
def test_variant_messages(case):
    fields = dict(VARIANT_CASES[case])
    if case == "scalar integer 2.5":  # an integer scalar with a fractional value: only C can say so
        c, keep = library_variant({k: v for k, v in fields.items() if k != "scalars"})
        scalars = (_lib.VariantScalar * 1)(_lib.VariantScalar(b"c", 2.5, 1))
        c.scalars, c.num_scalars = ctypes.addressof(scalars), 1
        expected = refused(c)
        got_variant = python_variant(fields)._replace(scalar_integer=[True])
    else:
        c, keep = library_variant(fields)
        expected = refused(c)
        got_variant = python_variant(fields)
    q, k, o, lse = (meta(spec(s, "bfloat16")) for s in (Q, KV, Q, LSE))
    with pytest.raises(KgenError) as e:
        _checks.attention_forward_variant(q, k, k, o, lse.float(), 0.0, False, got_variant)
    assert e.value.status == Status.INVALID_ARGUMENT
    assert str(e.value) == expected


@needs_torch
def test_valid_variant_passes_the_fake_checks():
    q, k, o, lse = (meta(spec(s, "bfloat16")) for s in (Q, KV, Q, LSE))
    variant = python_variant(dict(window_left=4, window_right=0, softcap=30.0, alibi_slopes=spec((8,)),
                                  document_ids=spec((2, 120), "int32"), sinks=spec((8,)), prefix=3, chunk=7,
                                  score_mod="score + t[h][k]", tensors={"t": spec((8, 120))}))
    _checks.attention_forward_variant(q, k, k, o, lse.float(), 0.0, False, variant)


# --- kgen.torch's keyword arguments -------------------------------------------------------------------

def cuda(shape, dtype=None):
    return torch.empty(shape, dtype=dtype or torch.bfloat16, device="cuda")


BAD_KEYWORDS = {  # keywords: (error type, message pattern)
    "window scalar": (dict(window=128), ValueError, r"^window must be None or \(left, right\)"),
    "window of three": (dict(window=(1, 2, 3)), ValueError, r"^window must be None"),
    "window -2": (dict(window=(-2, 0)), ValueError, r"got \(-2, 0\)$"),
    "window float": (dict(window=(1.5, 0)), ValueError, r"^window must be None"),
    "softcap negative": (dict(softcap=-1.0), ValueError, r"^softcap must be a finite number >= 0"),
    "softcap nan": (dict(softcap=float("nan")), ValueError, r"^softcap must be"),
    "softcap str": (dict(softcap="30"), ValueError, r"^softcap must be"),
    "prefix negative": (dict(prefix=-1), ValueError, r"^prefix must be None or an int >= 0"),
    "chunk 0": (dict(chunk=0), ValueError, r"^chunk must be None or an int >= 1"),
    "score_mod bytes": (dict(score_mod=b"score"), TypeError, r"^score_mod must be a str"),
    "scalars list": (dict(scalars=[1.0]), TypeError, r"^scalars and tensors must be dicts"),
    "scalar bool": (dict(score_mod="score", scalars={"c": True}), TypeError, r"^scalars: 'c' must map"),
    "tensor list": (dict(score_mod="score", tensors={"t": [1.0]}), TypeError, r"^tensors\[t\] must be a torch.Tensor"),
    "alibi list": (dict(alibi_slopes=[0.5] * 8), TypeError, r"^alibi_slopes must be a torch.Tensor"),
}


@needs_torch
@pytest.mark.parametrize("case", BAD_KEYWORDS)
@pytest.mark.parametrize("function", ["attention_forward", "attention"])
def test_bad_keywords(case, function):
    keywords, error, pattern = BAD_KEYWORDS[case]
    with FakeTensorMode():
        q, k = cuda(Q), cuda(KV)
        with pytest.raises(error, match=pattern):
            getattr(kgen.torch, function)(q, k, k, **keywords)


@needs_torch
def test_library_sentences_through_kgen_torch():
    """Tensor dtypes, shapes and devices are named as the library names them, at trace time."""
    with FakeTensorMode():
        q, k = cuda(Q), cuda(KV)
        f = kgen.torch.attention_forward
        cases = [
            (dict(alibi_slopes=cuda((8,), torch.bfloat16)), r"^variant.alibi_slopes: dtype bf16 must be fp32$"),
            (dict(sinks=cuda((2,), torch.float32)), r"^variant.sinks: shape \(2\) must be \(heads_q\) = \(8\)$"),
            (dict(document_ids=cuda((2, 120), torch.int64)),
             r"^variant.document_ids: dtype \(code 0, 64 bits\) is not float16, bfloat16, float32 or int32$"),
            (dict(document_ids=cuda((2, 100), torch.int32)),
             r"^variant.document_ids: shape \(2, 100\) must be \(batch, n_k\) = \(2, 120\)$"),
            (dict(score_mod="score + t[h]", tensors={"t": cuda((8,), torch.float16)}),
             r"^variant.tensors\[t\]: dtype fp16 must be fp32 or int32$"),
            (dict(scalars={"c": 1.0}), r"^variant.scalars: inputs were given but no score_mod or mask_mod reads them$"),
        ]
        for keywords, pattern in cases:
            with pytest.raises(KgenError, match=pattern):
                f(q, k, k, **keywords)
        with pytest.raises(KgenError, match=r"^variant.window_left: 1073741825 must be in \[-1, 2\^30\]$"):
            torch.ops.kgen.attention_forward_variant(q, k, k, None, False, "bhnd", False, (1 << 30) + 1)
        with pytest.raises(ValueError, match="window_left must fit in int32"):
            torch.ops.kgen.attention_forward_variant(q, k, k, window_left=1 << 40)
        with pytest.raises(ValueError, match="tensor_names and tensors must have one entry per tensor"):
            torch.ops.kgen.attention_forward_variant(q, k, k, score_mod="score", tensor_names=["a", "b"],
                                                     tensors=[cuda((8,), torch.float32)])


@needs_torch
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_fake_variant_outputs(layout):
    with FakeTensorMode():
        shape = (2, 100, 8, 64) if layout == "bnhd" else Q
        q = cuda(shape)
        k = cuda((2, 120, 2, 64) if layout == "bnhd" else KV)
        o, lse = torch.ops.kgen.attention_forward_variant(q, k, k, None, True, layout, window_left=16, window_right=0)
        assert (o.shape, o.dtype, o.stride()) == (q.shape, q.dtype, q.stride())
        assert (lse.shape, lse.dtype, lse.stride()) == ((2, 8, 100), torch.float32, (800, 100, 1))
        o2, lse2 = kgen.torch.attention_forward(q, k, k, layout=layout, softcap=30.0, sinks=cuda((8,), torch.float32),
                                                return_lse=True)
        assert o2.shape == q.shape and lse2.shape == (2, 8, 100)
        out = torch.empty_like(q)
        assert kgen.torch.attention_forward(q, k, k, layout=layout, out=out, causal_top_left=True) is out
        with torch.no_grad():
            assert kgen.torch.attention(q, k, k, layout=layout, chunk=32).shape == q.shape


@needs_torch
def test_gradients_through_a_variant_are_refused():
    with FakeTensorMode():
        q, k = cuda(Q).requires_grad_(), cuda(KV)
        pattern = (r"^kgen.torch.attention: the backward of attention variants is not available yet, and gradients "
                   r"were asked through window=\(128, 0\), softcap=30.0; ")
        with pytest.raises(NotImplementedError, match=pattern):
            kgen.torch.attention(q, k, k, window=(128, 0), softcap=30.0)
        sinks = cuda((8,), torch.float32).requires_grad_()
        with pytest.raises(NotImplementedError, match=r"through sinks=<tensor>"):
            kgen.torch.attention(q.detach(), k, k, sinks=sinks)
        with torch.no_grad():
            assert kgen.torch.attention(q, k, k, window=(128, 0)).shape == q.shape
        # the raw forward is not differentiable, variant or not: it runs
        assert kgen.torch.attention_forward(q, k, k, window=(128, 0)).shape == q.shape


@needs_torch
def test_operators_are_registered():
    ops = {"attention_forward_variant": True, "attention_forward_variant_out": False}
    for name, autocast in ops.items():
        qualname = f"kgen::{name}"
        for key in ("CUDA", "CPU", "Meta"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key), f"{qualname} has no {key} kernel"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "AutocastCUDA") == autocast
        schema = getattr(torch.ops.kgen, name).default._schema
        fields = [a.name for a in schema.arguments][-len(_checks.Variant._fields):]
        assert fields == list(_checks.Variant._fields), "the schema's variant arguments are _checks.Variant's fields"


@needs_torch
def test_compile_traces_a_variant():
    torch._dynamo.reset()

    def f(q, k, v, slopes, bias):
        return kgen.torch.attention(q, k, v, causal=True, window=(64, 0), alibi_slopes=slopes, softcap=30.0,
                                    score_mod="score + bias[h][q - k + 255] * w", scalars={"w": 0.5},
                                    tensors={"bias": bias})

    q = torch.empty(1, 8, 16, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(1, 2, 16, 64, device="meta", dtype=torch.bfloat16)
    slopes, bias = torch.empty(8, device="meta"), torch.empty(8, 511, device="meta")
    with torch.no_grad():
        for backend in ("eager", "aot_eager"):
            o = torch.compile(f, fullgraph=True, backend=backend)(q, k, k, slopes, bias)
            assert o.shape == q.shape and o.dtype == q.dtype


# --- what the kernels hand the library ------------------------------------------------------------------

def recorder(calls):
    def function(name):
        def call(*args):
            record = [name]
            for a in args[:5]:
                if a is None:
                    record.append(None)
                    continue
                t = _lib.DLTensor.from_address(a)
                record.append((tuple(t.shape[:t.ndim]), tuple(t.strides[:t.ndim]), (t.dtype.code, t.dtype.bits)))
            if name == "kgen_attention_forward_variant":
                c = _lib.AttentionVariant.from_address(args[6])
                variant = {field: getattr(c, field) for field, _ in c._fields_}
                for field in ("alibi_slopes", "document_ids", "sinks"):
                    if variant[field]:
                        t = _lib.DLTensor.from_address(variant[field])
                        variant[field] = (tuple(t.shape[:t.ndim]), (t.dtype.code, t.dtype.bits), t.data)
                scalars = ctypes.cast(c.scalars, ctypes.POINTER(_lib.VariantScalar))
                variant["scalars"] = [(scalars[i].name, scalars[i].value, scalars[i].integer)
                                      for i in range(c.num_scalars)]
                tensors = ctypes.cast(c.tensors, ctypes.POINTER(_lib.VariantTensor))
                variant["tensors"] = []
                for i in range(c.num_tensors):
                    t = _lib.DLTensor.from_address(tensors[i].tensor)
                    variant["tensors"].append((tensors[i].name, tuple(t.shape[:t.ndim]), tuple(t.strides[:t.ndim]),
                                               (t.dtype.code, t.dtype.bits), tensors[i].learnable, tensors[i].grad))
                record.append(variant)
            calls.append(record)
            for i in (3, 4):  # zero-fill o and lse, as a kernel writes them
                if args[i] is not None:
                    t = _lib.DLTensor.from_address(args[i])
                    extent = 1 + sum((t.shape[j] - 1) * t.strides[j] for j in range(t.ndim))
                    ctypes.memset(t.data, 0, extent * t.dtype.bits // 8)
            return 0
        return call
    return function


@pytest.fixture
def calls(monkeypatch):
    """CPU tensors run the kernels against a recorder of the C calls; the fake kernels take CPU
    tensors for device memory."""
    recorded = []
    monkeypatch.setattr(_lib, "function", recorder(recorded))
    device = _checks.dl_device
    monkeypatch.setattr(_checks, "dl_device", lambda d: (_lib.kDLCUDA, 0) if d.type == "cpu" else device(d))
    return recorded


@needs_torch
def test_kernel_passes_the_variant(calls):
    q, k, v = torch.randn(2, 300, 3, 4, 16).bfloat16().unbind(2)  # packed BNHD views
    slopes, sinks = torch.rand(4), torch.rand(4)
    docs = torch.zeros(2, 300, dtype=torch.int32)
    bias = torch.randn(4, 700)[:, ::2]  # a strided user tensor
    variant = _checks.Variant(causal_top_left=True, window_left=5, window_right=0, softcap=30.0, alibi_slopes=slopes,
                              prefix=2, chunk=9, document_ids=docs, sinks=sinks, score_mod="score + bias[h][k] * w",
                              mask_mod="k >= n", scalar_names=["w", "n"], scalar_values=[0.5, 3.0],
                              scalar_integer=[False, True], tensor_names=["bias"], tensors=[bias])
    o, lse = _kernels.variant_forward(q, k, v, 0.25, True, "bnhd", variant)
    name, *tensors, c = calls[-1]
    assert name == "kgen_attention_forward_variant"
    assert tensors[0] == ((2, 4, 300, 16), (300 * 3 * 4 * 16, 16, 3 * 4 * 16, 1), BF16)  # q's (b, h, n, d) view
    assert tensors[4][0] == (2, 4, 300) and o.shape == q.shape
    assert (c["causal_top_left"], c["window_left"], c["window_right"], c["softcap"], c["prefix"], c["chunk"]) == \
        (1, 5, 0, 30.0, 2, 9)
    assert c["alibi_slopes"] == ((4,), F32, slopes.data_ptr()) and c["sinks"] == ((4,), F32, sinks.data_ptr())
    assert c["document_ids"] == ((2, 300), I32, docs.data_ptr())
    assert (c["score_mod"], c["mask_mod"]) == (b"score + bias[h][k] * w", b"k >= n")
    assert c["scalars"] == [(b"w", 0.5, 0), (b"n", 3.0, 1)]
    assert c["tensors"] == [(b"bias", (4, 350), (700, 2), F32, 0, None)]
    assert not c["sinks_grad"]


@needs_torch
def test_keywords_become_the_variant(calls):
    q = torch.randn(1, 2, 8, 16).half()
    bias = torch.randn(2, 8)
    kgen.torch.attention_forward(q, q, q, score_mod="score * c + bias[h][k]", scalars={"c": 2, "d": 0.5},
                                 tensors={"bias": bias}, window=(3, -1), prefix=4)
    c = calls[-1][-1]
    assert c["scalars"] == [(b"c", 2.0, 1), (b"d", 0.5, 0)]
    assert [t[0] for t in c["tensors"]] == [b"bias"]
    assert (c["window_left"], c["window_right"], c["prefix"], c["chunk"], c["softcap"]) == (3, -1, 4, 0, 0.0)


@needs_torch
def test_plain_calls_take_the_plain_path(calls):
    q = torch.randn(1, 2, 8, 16).half()
    kgen.torch.attention_forward(q, q, q, causal=True)
    assert calls[-1][0] == "kgen_attention_forward"
    kgen.torch.attention(q, q, q)
    assert calls[-1][0] == "kgen_attention_forward"
    # the variant keywords at their defaults: the plain variant, which the library runs as plain attention
    kgen.torch.attention_forward(q, q, q, window=None, softcap=0, prefix=None, chunk=None, scalars={})
    c = calls[-1][-1]
    plain = _lib.AttentionVariant()
    assert all(c[field] == getattr(plain, field) for field in c if field not in ("scalars", "tensors"))
    assert c["scalars"] == c["tensors"] == []


@needs_torch
def test_signatures_list_the_variant_keywords():
    import inspect
    for function in (kgen.torch.attention, kgen.torch.attention_forward):
        parameters = inspect.signature(function).parameters
        assert {"window", "softcap", "alibi_slopes", "sinks", "causal_top_left", "prefix", "chunk", "document_ids",
                "score_mod", "mask_mod", "scalars", "tensors"} <= set(parameters)
        assert parameters["window"].default is None and parameters["softcap"].default == 0
    with FakeTensorMode():
        q = cuda(Q)
        with pytest.raises(TypeError, match=r"^attention\(\) got an unexpected keyword argument 'windw'$"):
            kgen.torch.attention(q, q, q, windw=(1, 0))


def opcheck_cases():
    ops = torch.ops.kgen
    cases = []
    for layout in ("bhnd", "bnhd"):
        def t(b, h, n, d):
            return torch.randn((b, n, h, d) if layout == "bnhd" else (b, h, n, d)).bfloat16()
        q, k = t(2, 4, 7, 16), t(2, 2, 9, 16)
        variant = (False, 3, 0, 30.0, torch.rand(4), -1, 0, torch.zeros(2, 9, dtype=torch.int32), torch.rand(4),
                   "score + bias[h][k]", None, ["c"], [1.0], [True], ["bias"], [torch.randn(4, 9)])
        cases += [
            (ops.attention_forward_variant, (q, k, k, 0.5, True, layout, *variant)),
            (ops.attention_forward_variant_out, (q, k, k, torch.empty_like(q), torch.empty(2, 4, 7), None, False,
                                                 layout, *variant)),
            (ops.attention_forward_variant_out, (q, k, k, torch.empty_like(q), None, None, False, layout)),
        ]
    return cases


@needs_torch
@pytest.mark.parametrize("case", range(6))
def test_opcheck_with_a_stand_in_library(calls, case):
    op, args = opcheck_cases()[case]
    torch.library.opcheck(op, args)
