"""Attention variants without a GPU: the C API's checks through ctypes (kgen_attention_variant,
kgen_attention_forward_variant, kgen_attention_backward_variant), the fake kernels' sentences
against the library's own, the keyword arguments of kgen.torch, the operators' registration, fake
outputs, torch.compile tracing of the forward and backward, autograd through a stand-in library
(which gradients flow, the double backward's error) and opcheck against it. Descriptors claim device memory on a device index no
machine has: the library validates (and parses the expressions) before any device work, so a
call that passes validation fails at the device query instead of launching anything."""
import ctypes
import re
import threading

import pytest

from conftest import StandInMode
from kgen import KgenError, Status, _lib

try:
    import torch
except ImportError:  # the C API's tests run without PyTorch
    torch = None
else:
    import kgen.torch
    from kgen import _checks, _kernels, _ops
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


def run_variant(function, tensors, options, variant):
    """(status, message) of C `function(tensors..., &options, variant, NULL stream)`."""
    status = _lib.function(function)(*map(ctypes.byref, tensors), ctypes.byref(options),
                                     None if variant is None else ctypes.byref(variant), None)
    return status, _lib.last_error()


def forward(variant, q=Q, dtype=BF16):
    """(status, message) of kgen_attention_forward_variant on a valid (q, k, v, o, lse)."""
    tensors = [descriptor(q, dtype), descriptor(KV, dtype), descriptor(KV, dtype), descriptor(q, dtype),
               descriptor(q[:3], F32)]
    return run_variant("kgen_attention_forward_variant", tensors, _lib.AttentionOptions(scale=0.0, causal=0), variant)


def backward(variant, options=None):
    """(status, message) of kgen_attention_backward_variant on a valid (q, k, v, o, lse, d_o, dq, dk, dv)."""
    tensors = [descriptor(s, F32 if s == LSE else BF16) for s in (Q, KV, KV, Q, LSE, Q, Q, KV, KV)]
    return run_variant("kgen_attention_backward_variant", tensors, options or _lib.AttentionBackwardOptions(), variant)


def double_backward(variant, options=None):
    """(status, message) of kgen_attention_double_backward_variant on a valid (q, k, v, o, lse, d_o,
    gq, gk, gv, q_bar, k_bar, v_bar, do_bar)."""
    tensors = [descriptor(s, F32 if s == LSE else BF16) for s in (Q, KV, KV, Q, LSE, Q, Q, KV, KV, Q, KV, KV, Q)]
    return run_variant("kgen_attention_double_backward_variant", tensors, options or _lib.AttentionBackwardOptions(),
                       variant)


def refused(variant, call=forward, **kwargs):
    status, message = call(variant, **kwargs)
    assert status == Status.INVALID_ARGUMENT, f"status {status}: {message}"
    return message


def passes_validation(variant, call=forward):
    """The call got past every argument check: it fails only where it needs a device (without a
    driver, its own status; with one, the descriptors' device 4096 does not exist)."""
    status, message = call(variant)
    if status == Status.INVALID_ARGUMENT and re.match(r"device \d+ does not exist", message):
        return
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


def test_backward_null_and_plain_variant_are_the_plain_call():
    tensors = [descriptor(s, F32 if s == LSE else BF16) for s in (Q, KV, KV, Q, LSE, Q, Q, KV, KV)]
    options = _lib.AttentionBackwardOptions(causal=1, deterministic=1)
    plain = _lib.function("kgen_attention_backward")(*map(ctypes.byref, tensors), ctypes.byref(options), None)
    plain_message = _lib.last_error()
    assert backward(None, options) == backward(_lib.AttentionVariant(), options) == (plain, plain_message)


def test_backward_gradient_buffers():
    """sinks_grad is required with sinks, a learnable tensor needs its grad; the forward reads
    neither gradient field."""
    sinks, sinks_grad, int_grad = descriptor((8,), F32), descriptor((8,), F32), descriptor((8,), I32)
    c = _lib.AttentionVariant(window_left=16, window_right=0, sinks=ctypes.addressof(sinks))
    assert refused(c, backward) == "variant.sinks_grad: the backward of a call with sinks needs sinks_grad"
    c.sinks_grad = ctypes.addressof(sinks_grad)
    passes_validation(c, backward)
    c.sinks_grad = ctypes.addressof(int_grad)
    assert refused(c, backward) == "variant.sinks_grad: dtype (code 0, 32 bits) is not float16, bfloat16 or float32"
    passes_validation(c)
    bias, grad = descriptor((8, 120), F32), descriptor((8, 120), F32)
    tensors = (_lib.VariantTensor * 1)(_lib.VariantTensor(b"bias", ctypes.addressof(bias), 1, None))
    c = _lib.AttentionVariant(score_mod=b"score + bias[h][k]", tensors=ctypes.addressof(tensors), num_tensors=1)
    assert refused(c, backward) == "variant.tensors[bias].grad: data pointer is null"
    passes_validation(c)
    tensors[0].grad = ctypes.addressof(grad)
    passes_validation(c, backward)
    tensors[0].learnable = 0  # a grad without learnable: not read
    tensors[0].grad = ctypes.addressof(int_grad)
    assert refused(c, backward) == \
        "variant.tensors[bias].grad: dtype (code 0, 32 bits) is not float16, bfloat16 or float32"
    tensors[0].grad = None
    passes_validation(c, backward)


def test_double_backward_checks_the_variant_and_reads_no_gradient_field():
    """The double backward takes the forward's variant (null or empty: the plain call), checks it
    as the forward does, and reads neither sinks_grad nor a tensor's grad (it gives them none)."""
    tensors = [descriptor(s, F32 if s == LSE else BF16) for s in (Q, KV, KV, Q, LSE, Q, Q, KV, KV, Q, KV, KV, Q)]
    options = _lib.AttentionBackwardOptions(causal=1)
    plain = _lib.function("kgen_attention_double_backward")(*map(ctypes.byref, tensors), ctypes.byref(options), None)
    plain_message = _lib.last_error()
    assert double_backward(None, options) == double_backward(_lib.AttentionVariant(), options) == (plain, plain_message)
    sinks, int_grad = descriptor((8,), F32), descriptor((8,), I32)
    c = _lib.AttentionVariant(window_left=16, window_right=0, softcap=30.0, sinks=ctypes.addressof(sinks))
    passes_validation(c, double_backward)  # no sinks_grad needed
    c.sinks_grad = ctypes.addressof(int_grad)  # nor read
    passes_validation(c, double_backward)
    bias = descriptor((8, 120), F32)
    tensors = (_lib.VariantTensor * 1)(_lib.VariantTensor(b"bias", ctypes.addressof(bias), 1, None))
    c = _lib.AttentionVariant(score_mod=b"score + bias[h][k]", tensors=ctypes.addressof(tensors), num_tensors=1)
    passes_validation(c, double_backward)  # learnable without grad: the double backward gives it none
    assert refused(_lib.AttentionVariant(score_mod=b"score + bais"), double_backward).startswith(
        "score_mod, column 9: unknown name 'bais'")
    assert refused(_lib.AttentionVariant(softcap=-1.0), double_backward) == refused(_lib.AttentionVariant(softcap=-1.0))


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
    grads = fields.get("grads", {})
    for name, value in fields.items():
        if name == "grads":
            continue
        if name in ("alibi_slopes", "document_ids", "sinks", "sinks_grad"):
            setattr(c, name, address(value))
        elif name in ("score_mod", "mask_mod"):
            setattr(c, name, value.encode())
        elif name == "scalars":
            array = (_lib.VariantScalar * len(value))(*[_lib.VariantScalar(n.encode(), float(x), int(isinstance(x, int)))
                                                        for n, x in value.items()])
            keep.append(array)
            c.scalars, c.num_scalars = ctypes.addressof(array), len(array)
        elif name == "tensors":
            array = (_lib.VariantTensor * len(value))(*[
                _lib.VariantTensor(n.encode(), address(s), int(n in grads), address(grads[n]) if n in grads else None)
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
        elif name not in ("sinks_grad", "grads"):
            named[name] = value
    return _checks.Variant(**named)


def python_grads(fields: dict):
    """(sinks_grad, tensor_grads) of the fields' gradient buffers, as meta tensors (None = none)."""
    grads, sinks_grad = fields.get("grads", {}), fields.get("sinks_grad")
    return (None if sinks_grad is None else meta(sinks_grad),
            [meta(grads[n]) if n in grads else None for n in fields.get("tensors", {})])


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
    if case == "scalar integer 2.5":  # an integer scalar with a fractional value (the helpers take int for integer)
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
        _ops._fake_attention_forward_variant_out(q, k, k, o, lse.float(), None, False, "bhnd", *got_variant)
    assert e.value.status == Status.INVALID_ARGUMENT
    assert str(e.value) == expected


BIAS = dict(score_mod="score + bias[h][k]", tensors={"bias": spec((8, 120))})
BACKWARD_CASES = {
    "sinks without sinks_grad": dict(sinks=spec((8,))),
    "sinks_grad shape": dict(sinks=spec((8,)), sinks_grad=spec((16,))),
    "sinks_grad strided": dict(sinks=spec((8,)), sinks_grad=spec((8,), "float32", (2,))),
    "sinks_grad bf16": dict(sinks=spec((8,)), sinks_grad=spec((8,), "bfloat16")),
    "sinks_grad int32": dict(sinks=spec((8,)), sinks_grad=spec((8,), "int32")),
    "sinks_grad 2-d": dict(sinks=spec((8,)), sinks_grad=spec((8, 1))),
    "learnable int32": dict(mask_mod="doc[b][q] == doc[b][k]", tensors={"doc": spec((2, 120), "int32")},
                            grads={"doc": spec((2, 120))}),
    "grad shape": dict(**BIAS, grads={"bias": spec((8, 119))}),
    "grad rank": dict(**BIAS, grads={"bias": spec((960,))}),
    "grad fp16": dict(**BIAS, grads={"bias": spec((8, 120), "float16")}),
    "grad int32": dict(**BIAS, grads={"bias": spec((8, 120), "int32")}),
    "grad strided": dict(**BIAS, grads={"bias": spec((8, 120), "float32", (240, 2))}),
    "grad transposed": dict(**BIAS, grads={"bias": spec((8, 120), "float32", (1, 8))}),
    "sinks before grads": dict(**BIAS, sinks=spec((8,)), grads={"bias": spec((8, 119))}),
    "forward checks first": dict(alibi_slopes=spec((3,)), sinks=spec((8,))),
}


@needs_torch
@pytest.mark.parametrize("case", BACKWARD_CASES)
def test_backward_variant_messages(case):
    fields = BACKWARD_CASES[case]
    c, keep = library_variant(fields)
    expected = refused(c, backward)
    q, k, o, lse = (meta(spec(s, "bfloat16")) for s in (Q, KV, Q, LSE))
    with pytest.raises(KgenError) as e:
        _checks.validate("kgen_attention_backward_variant", (q, k, k, o, lse.float(), q, q, k, k), False,
                         _lib.AttentionBackwardOptions(), _ops._variant_argument(python_variant(fields),
                                                                                 *python_grads(fields)))
    assert e.value.status == Status.INVALID_ARGUMENT
    assert str(e.value) == expected


@needs_torch
def test_document_ids_need_n_q_at_most_n_k():
    docs = descriptor((2, 120), I32)
    expected = refused(_lib.AttentionVariant(document_ids=ctypes.addressof(docs)), q=(2, 8, 130, 64))
    assert expected == "variant.document_ids: needs n_q <= n_k (query q is key q + n_k - n_q), got n_q=130 and n_k=120"
    q, k, lse = meta(spec((2, 8, 130, 64), "bfloat16")), meta(spec(KV, "bfloat16")), meta(spec((2, 8, 130)))
    with pytest.raises(KgenError) as e:
        _ops._fake_attention_forward_variant_out(q, k, k, q, lse, None, False, "bhnd",
                                                 *python_variant(dict(document_ids=spec((2, 120), "int32"))))
    assert str(e.value) == expected


@needs_torch
def test_valid_variant_passes_the_fake_checks():
    q, k, o, lse = (meta(spec(s, "bfloat16")) for s in (Q, KV, Q, LSE))
    variant = python_variant(dict(window_left=4, window_right=0, softcap=30.0, alibi_slopes=spec((8,)),
                                  document_ids=spec((2, 120), "int32"), sinks=spec((8,)), prefix=3, chunk=7,
                                  score_mod="score + t[h][k]", tensors={"t": spec((8, 120))}))
    _ops._fake_attention_forward_variant_out(q, k, k, o, lse.float(), None, False, "bhnd", *variant)


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
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_fake_variant_backward_outputs(layout):
    with FakeTensorMode():
        q = cuda((2, 100, 8, 64) if layout == "bnhd" else Q)
        k = cuda((2, 120, 2, 64) if layout == "bnhd" else KV)
        o, lse = torch.ops.kgen.attention_forward_variant(q, k, k, None, True, layout, window_left=16, window_right=0)
        sinks, bias, fixed = cuda((8,), torch.float32), cuda((8, 239), torch.float32), cuda((8, 120), torch.float32)
        variant = dict(sinks=sinks, score_mod="score + bias[h][q - k + 119] + fixed[h][k]",
                       tensor_names=["fixed", "bias"], tensors=[fixed, bias[:, ::2][:, :120]])
        dq, dk, dv, sinks_grad, grads = torch.ops.kgen.attention_backward_variant(
            q, k, k, o, lse, o, None, True, layout, False, None, [False, True], **variant)
        assert [(t.shape, t.dtype) for t in (dq, dk, dv)] == [(q.shape, q.dtype), (k.shape, k.dtype), (k.shape, k.dtype)]
        assert (sinks_grad.shape, sinks_grad.dtype) == ((8,), torch.float32)
        assert len(grads) == 1 and (grads[0].shape, grads[0].dtype, grads[0].stride()) == \
            ((8, 120), torch.float32, (120, 1))
        dq, dk, dv, sinks_grad, grads = torch.ops.kgen.attention_backward_variant(q, k, k, o, lse, o, layout=layout,
                                                                                  chunk=32)
        assert sinks_grad.shape == (0,) and grads == []
        with pytest.raises(ValueError, match=r"^tensor_learnable must have one entry per tensor, got 1 for 2 tensors$"):
            torch.ops.kgen.attention_backward_variant(q, k, k, o, lse, o, None, True, layout, False, None, [True],
                                                      **variant)
        docs = cuda((2, 120), torch.int32)
        with pytest.raises(KgenError, match=r"^variant.tensors\[doc\]: a learnable tensor must be fp32$"):
            torch.ops.kgen.attention_backward_variant(q, k, k, o, lse, o, None, True, layout, False, None, [True],
                                                      mask_mod="doc[b][q] == doc[b][k]", tensor_names=["doc"],
                                                      tensors=[docs])


@needs_torch
def test_fake_autograd_through_a_variant():
    """kgen.torch.attention records a variant for autograd; its backward runs the fake kernels
    (meta tensors: the autograd engine runs no CUDA device here)."""
    def meta_tensor(shape, dtype=torch.bfloat16):
        return torch.empty(shape, dtype=dtype, device="meta").requires_grad_()

    q, k = meta_tensor(Q), meta_tensor(KV)
    sinks, bias = meta_tensor((8,), torch.float32), meta_tensor((8, 120), torch.float32)
    o = kgen.torch.attention(q, k, k, window=(128, 0), softcap=30.0, sinks=sinks, score_mod="score + bias[h][k]",
                             tensors={"bias": bias})
    assert o.requires_grad and o.shape == q.shape
    o.sum().backward()
    assert (q.grad.shape, k.grad.shape, sinks.grad.shape, bias.grad.shape) == (Q, KV, (8,), (8, 120))
    with torch.no_grad():
        assert not kgen.torch.attention(q, k, k, window=(128, 0)).requires_grad


@needs_torch
def test_operators_are_registered():
    ops = {"attention_forward_variant": True, "attention_forward_variant_out": False,
           "attention_backward_variant": False}
    for name, autocast in ops.items():
        qualname = f"kgen::{name}"
        for key in ("CUDA", "CPU", "Meta"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key), f"{qualname} has no {key} kernel"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "AutocastCUDA") == autocast
        # autograd lives in kgen.torch's Functions, outside the operator
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "AutogradCUDA")
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


@needs_torch
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "graphs"])
def test_compile_traces_a_variant_forward_and_backward(backend):
    torch._dynamo.reset()

    def f(q, k, v, slopes, sinks, bias, fixed, docs):
        return kgen.torch.attention(q, k, v, layout="bnhd", window=(64, 0), alibi_slopes=slopes, sinks=sinks,
                                    document_ids=docs, score_mod="score + bias[h][q - k + 15] * w + fixed[h]",
                                    scalars={"w": 0.5}, tensors={"bias": bias, "fixed": fixed})

    def meta_tensor(*shape, dtype=torch.float32, grad=True):
        return torch.empty(shape, device="meta", dtype=dtype).requires_grad_(grad)

    q, k, v = meta_tensor(1, 16, 8, 64, dtype=torch.bfloat16), *(meta_tensor(1, 16, 2, 64, dtype=torch.bfloat16)
                                                                 for _ in range(2))
    slopes, sinks, bias, fixed = meta_tensor(8), meta_tensor(8), meta_tensor(8, 31), meta_tensor(8, grad=False)
    docs = torch.empty(1, 16, device="meta", dtype=torch.int32)
    recorder = None
    if backend == "graphs":
        from test_ops import GraphRecorder
        recorder = GraphRecorder()
        backend = recorder.backend
    o = torch.compile(f, fullgraph=True, backend=backend)(q, k, v, slopes, sinks, bias, fixed, docs)
    assert o.shape == q.shape and o.dtype == q.dtype
    o.float().sum().backward()
    assert [t.grad.shape for t in (q, k, v, sinks, bias)] == [q.shape, k.shape, v.shape, (8,), (8, 31)]
    assert slopes.grad is None and fixed.grad is None
    if recorder is not None:
        forward, backward = recorder.targets("forward"), recorder.targets("backward")
        assert "kgen.attention_forward_variant.default" in forward, forward
        assert "kgen.attention_backward_variant.default" in backward, backward


# --- what the kernels hand the library ------------------------------------------------------------------

GRAD = 1.5  # what the stand-in writes into each variant gradient buffer


def describe(address):
    """(shape, dtype, data) of a DLTensor's address, or None for NULL."""
    if not address:
        return None
    t = _lib.DLTensor.from_address(address)
    return tuple(t.shape[:t.ndim]), (t.dtype.code, t.dtype.bits), t.data


def fill(address, value=None):
    """Zero-fills a DLTensor's memory, or writes the float32 `value` into each element."""
    t = _lib.DLTensor.from_address(address)
    extent = 1 + sum((t.shape[j] - 1) * t.strides[j] for j in range(t.ndim))
    if value is None:
        ctypes.memset(t.data, 0, extent * t.dtype.bits // 8)
    else:
        (ctypes.c_float * extent).from_address(t.data)[:] = [value] * extent


def recorder(calls):
    """A stand-in for the library's C functions: each call is recorded (its tensors and variant),
    its outputs zero-filled (o, lse; dq, dk, dv), the variant's gradient buffers set to GRAD, and
    scratch queries answered with 64 bytes; a validate-only call (the fake kernels') returns OK."""
    mode = StandInMode()

    def function(name):
        if name == "kgen_validate_only":
            return mode

        def call(*args):
            if mode.on:
                return 0
            if name.endswith("workspace_bytes"):
                ctypes.cast(args[-1], ctypes.POINTER(ctypes.c_size_t))[0] = 64
                return 0
            double = "double_backward" in name
            count = 13 if double else 9 if "backward" in name else 5  # tensor arguments
            record = [name]
            for a in args[:count]:
                if a is None:
                    record.append(None)
                    continue
                t = _lib.DLTensor.from_address(a)
                record.append((tuple(t.shape[:t.ndim]), tuple(t.strides[:t.ndim]), (t.dtype.code, t.dtype.bits)))
            grads = []
            if name.endswith("_variant"):
                c = _lib.AttentionVariant.from_address(args[count + 1])
                variant = {field: getattr(c, field) for field, _ in c._fields_}
                for field in ("alibi_slopes", "document_ids", "sinks", "sinks_grad"):
                    variant[field] = describe(variant[field])
                scalars = ctypes.cast(c.scalars, ctypes.POINTER(_lib.VariantScalar))
                variant["scalars"] = [(scalars[i].name, scalars[i].value, scalars[i].integer)
                                      for i in range(c.num_scalars)]
                tensors = ctypes.cast(c.tensors, ctypes.POINTER(_lib.VariantTensor))
                variant["tensors"] = []
                for i in range(c.num_tensors):
                    t = _lib.DLTensor.from_address(tensors[i].tensor)
                    variant["tensors"].append((tensors[i].name, tuple(t.shape[:t.ndim]), tuple(t.strides[:t.ndim]),
                                               (t.dtype.code, t.dtype.bits), tensors[i].learnable,
                                               describe(tensors[i].grad)))
                    if tensors[i].learnable:
                        grads.append(tensors[i].grad)
                if c.sinks and "backward" in name and not double:
                    grads.append(c.sinks_grad)
                record.append(variant)
            calls.append(record)
            for i in (9, 10, 11, 12) if double else (6, 7, 8) if count == 9 else (3, 4):  # the outputs
                if args[i] is not None:
                    fill(args[i])
            for grad in grads:
                fill(grad, GRAD)
            return 0
        return call
    return function


@pytest.fixture
def calls(monkeypatch):
    """CPU tensors run the kernels against a recorder of the C calls; the fake kernels take CPU
    tensors for device memory."""
    recorded = []
    monkeypatch.setattr(_lib, "function", recorder(recorded))
    monkeypatch.setattr(_kernels._calls, "_forms", threading.local())  # keep the stand-in's sizes out of later tests
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
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_gradients_flow_to_q_k_v_sinks_and_learnable_tensors(calls, layout):
    def t(*shape, dtype=torch.bfloat16):  # logical (b, h, n, d), in the layout
        x = torch.randn(shape).to(dtype)
        return (x.transpose(1, 2).contiguous() if layout == "bnhd" else x).requires_grad_()

    q, k, v = t(1, 4, 8, 16), t(1, 2, 8, 16), t(1, 2, 8, 16)
    slopes, sinks = torch.rand(4, requires_grad=True), torch.rand(4, requires_grad=True)
    bias, fixed = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    docs = torch.zeros(1, 8, dtype=torch.int32)
    o = kgen.torch.attention(q, k, v, causal=True, layout=layout, alibi_slopes=slopes, sinks=sinks, document_ids=docs,
                             score_mod="score + bias[h][k] + fixed[h][k]", tensors={"fixed": fixed, "bias": bias})
    assert calls[-1][0] == "kgen_attention_forward_variant" and o.requires_grad
    (2 * o.float()).sum().backward()
    name, *tensors, c = calls[-1]
    assert name == "kgen_attention_backward_variant" and len(calls) == 2
    assert [x[0] for x in tensors] == [(1, 4, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16), (1, 4, 8, 16), (1, 4, 8),
                                       (1, 4, 8, 16), (1, 4, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16)]
    assert [(x[0], x[4]) for x in c["tensors"]] == [(b"fixed", 0), (b"bias", 1)]
    assert c["tensors"][0][5] is None and c["tensors"][1][5][:2] == ((4, 8), F32)
    assert c["sinks_grad"][:2] == ((4,), F32) and c["alibi_slopes"][:2] == ((4,), F32)
    for x in (q, k, v):  # the stand-in's zeros
        assert x.grad.shape == x.shape and not x.grad.any()
    assert torch.equal(sinks.grad, torch.full((4,), GRAD)) and torch.equal(bias.grad, torch.full((4, 8), GRAD))
    assert slopes.grad is None and fixed.grad is None  # alibi slopes are constants; fixed does not require grad

    # only the sinks learn: the call is still recorded, and only they get a gradient
    sinks.grad = None
    q, k, v = (x.detach() for x in (q, k, v))
    kgen.torch.attention(q, k, v, layout=layout, sinks=sinks).float().sum().backward()
    assert calls[-1][0] == "kgen_attention_backward_variant" and torch.equal(sinks.grad, torch.full((4,), GRAD))
    assert q.grad is None
    # nothing learns: no backward is recorded
    with torch.no_grad():
        assert not kgen.torch.attention(q, k, v, layout=layout, sinks=sinks).requires_grad
    assert not kgen.torch.attention(q, k, v, layout=layout, sinks=sinks.detach()).requires_grad


@needs_torch
def test_double_backward_of_a_variant_runs_its_kernel(calls):
    q, k = torch.randn(1, 4, 8, 16).requires_grad_(), torch.randn(1, 2, 8, 16).requires_grad_()
    sinks = torch.rand(4)  # a constant: the double backward serves it
    o = kgen.torch.attention(q, k, k, window=(2, 0), softcap=30.0, sinks=sinks)
    dq, dk = torch.autograd.grad(o.sum(), (q, k), create_graph=True)
    assert dq.requires_grad and dk.requires_grad and calls[-1][0] == "kgen_attention_backward_variant"
    q_bar, k_bar = torch.autograd.grad((dq * torch.randn_like(dq)).sum(), (q, k))
    name, *tensors, c = calls[-1]
    assert name == "kgen_attention_double_backward_variant" and len(calls) == 3
    # q, k, v, o, lse, d_o, gq, gk (None: dk got no cotangent), gv (None), q_bar, k_bar, v_bar, do_bar
    assert [None if x is None else x[0] for x in tensors] == [
        (1, 4, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16), (1, 4, 8, 16), (1, 4, 8), (1, 4, 8, 16), (1, 4, 8, 16), None,
        None, (1, 4, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16), (1, 4, 8, 16)]
    assert (c["window_left"], c["window_right"], c["softcap"]) == (2, 0, 30.0)
    assert c["sinks"][:2] == ((4,), F32) and c["sinks_grad"] is None
    assert q_bar.shape == q.shape and k_bar.shape == k.shape and not q_bar.any()  # the stand-in's zeros


@needs_torch
def test_double_backward_of_a_packed_batch_runs_its_kernel(calls):
    q, k = torch.randn(20, 4, 16).requires_grad_(), torch.randn(20, 2, 16).requires_grad_()
    cu = torch.tensor([0, 7, 7, 20], dtype=torch.int32)
    o = kgen.torch.varlen_attention(q, k, k, cu, cu, 13, 13, causal=True)
    dq, dk = torch.autograd.grad(o.sum(), (q, k), create_graph=True)
    assert dq.requires_grad and dk.requires_grad and calls[-1][0] == "kgen_attention_varlen_backward"
    q_bar, k_bar = torch.autograd.grad((dq * torch.randn_like(dq)).sum(), (q, k))
    name, *tensors = calls[-1]
    assert name == "kgen_attention_varlen_double_backward" and len(calls) == 3
    # q, k, v, o, lse, d_o, gq, gk (None: dk got no cotangent), gv (None), q_bar, k_bar, v_bar, do_bar
    assert [None if x is None else x[0] for x in tensors] == [
        (20, 4, 16), (20, 2, 16), (20, 2, 16), (20, 4, 16), (4, 20), (20, 4, 16), (20, 4, 16), None, None,
        (20, 4, 16), (20, 2, 16), (20, 2, 16), (20, 4, 16)]
    assert q_bar.shape == q.shape and k_bar.shape == k.shape and not q_bar.any()  # the stand-in's zeros


@needs_torch
def test_double_backward_of_a_variant_refuses_gradients_it_does_not_give(calls):
    q, k = torch.randn(1, 4, 8, 16).requires_grad_(), torch.randn(1, 2, 8, 16).requires_grad_()
    sinks = torch.rand(4, requires_grad=True)
    o = kgen.torch.attention(q, k, k, window=(2, 0), sinks=sinks)
    dq, dk, d_sinks = torch.autograd.grad(o.sum(), (q, k, sinks), create_graph=True)
    assert dq.requires_grad and d_sinks.requires_grad and torch.equal(d_sinks.detach(), torch.full((4,), GRAD))
    for first in (dq, dk):
        with pytest.raises(NotImplementedError, match=r"^kgen.torch.attention: the double backward of a variant "
                                                      r"gives no gradient to the sinks; "):
            torch.autograd.grad(first.sum(), (q, k, sinks), allow_unused=True)
    with pytest.raises(NotImplementedError, match="gives no gradient to the sinks' or tensors' gradients"):
        torch.autograd.grad(d_sinks.sum(), (q, k), allow_unused=True)
    bias = torch.randn(4, 8, requires_grad=True)
    o = kgen.torch.attention(q, k, k, score_mod="score + bias[h][k]", tensors={"bias": bias})
    dq, = torch.autograd.grad(o.sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="gives no gradient to the tensors"):
        (dq * torch.randn_like(dq)).sum().backward()


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
        lse = torch.randn(2, 4, 7)
        learning = (False, 3, 0, 30.0, torch.rand(4), -1, 0, None, torch.rand(4), "score + bias[h][k] + fixed[h][k]",
                    None, [], [], [], ["bias", "fixed"], [torch.randn(4, 9), torch.randn(4, 9)])
        cases += [
            (ops.attention_backward_variant, (q, k, k, q, lse, q, 0.5, True, layout, False, None, [True, False],
                                              *learning)),
            (ops.attention_backward_variant, (q, k, k, q, lse, q, None, False, layout, True, None, None, False, 2, 2)),
            (ops.attention_forward_variant, (q, k, k, 0.5, True, layout, *variant)),
            (ops.attention_forward_variant_out, (q, k, k, torch.empty_like(q), torch.empty(2, 4, 7), None, False,
                                                 layout, *variant)),
            (ops.attention_forward_variant_out, (q, k, k, torch.empty_like(q), None, None, False, layout)),
        ]
    return cases


@needs_torch
@pytest.mark.parametrize("case", range(10))
def test_opcheck_with_a_stand_in_library(calls, case):
    op, args = opcheck_cases()[case]
    torch.library.opcheck(op, args)
