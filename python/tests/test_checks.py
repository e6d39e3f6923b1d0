"""The fake kernels' question to the library (kgen/_checks.py validate, on tensors without storage)
against a launch's own checks: for each invalid call below, the sentence the fake kernel raises
must be the one kgen's C function returns for the tensors' real descriptors. No GPU: those
descriptors claim device memory on a device index no machine has, so a call that passed
validation would fail at the device query instead of launching anything; in validate-only mode
(kgen_validate_only) a valid call returns OK without any device."""
import ctypes
import re

import pytest

torch = pytest.importorskip("torch")

from kgen import KgenError, Status, _lib  # noqa: E402
from kgen import _checks, _ops  # noqa: E402

pytestmark = pytest.mark.usefixtures("kgen_library")

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
NO_SUCH_DEVICE = 4096
ADDRESS = 1 << 20


def spec(shape, dtype=BF16, strides=None):
    return (tuple(shape), dtype, strides)


def meta(s):
    shape, dtype, strides = s
    if strides is None:
        return torch.empty(shape, dtype=dtype, device="meta")
    return torch.empty_strided(shape, strides, dtype=dtype, device="meta")


def descriptor(s):
    shape, dtype, strides = s
    if strides is None:
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
    return _lib.dltensor(ADDRESS, shape, strides, _checks.dl_dtype(dtype), (_lib.kDLCUDA, NO_SUCH_DEVICE))


def library_message(function, specs, options, *extra):
    tensors = [None if s is None else descriptor(s) for s in specs]
    status = _lib.function(function)(*map(_lib.ref, tensors), ctypes.byref(options), *extra)
    assert status == Status.INVALID_ARGUMENT, f"{function} returned {status}: {_lib.last_error()}"
    return _lib.last_error()


def python_message(function, specs, options, extra=None):
    """The sentence of the fake kernels' validate call on meta tensors of `specs`."""
    with pytest.raises(KgenError) as e:
        _checks.validate(function, [None if s is None else meta(s) for s in specs], False, options, extra)
    assert e.value.status == Status.INVALID_ARGUMENT
    return str(e.value)


# --- attention: q, k, v, o, lse (forward), + d_o, dq, dk, dv (backward) ----------------------------

Q, KV, LSE = spec((2, 8, 100, 64)), spec((2, 2, 120, 64)), spec((2, 8, 100), F32)
FORWARD = dict(q=Q, k=KV, v=KV, o=Q, lse=LSE)
FORWARD_CASES = {  # name: (changed arguments, scale)
    "q float64": (dict(q=spec(Q[0], torch.float64)), 0.0),
    "k int32": (dict(k=spec(KV[0], torch.int32)), 0.0),
    "q 3-d": (dict(q=spec((8, 100, 64))), 0.0),
    "q 5-d": (dict(q=spec((1, 2, 8, 100, 64))), 0.0),
    "q empty": (dict(q=spec((2, 8, 0, 64))), 0.0),
    "q last stride 2": (dict(q=spec((2, 8, 100, 64), BF16, (8 * 100 * 128, 100 * 128, 128, 2))), 0.0),
    "q batch above grid": (dict(q=spec((70000, 8, 1, 64)), o=spec((70000, 8, 1, 64))), 0.0),
    "k fp16": (dict(k=spec(KV[0], F16)), 0.0),
    "o fp32": (dict(o=spec(Q[0], F32)), 0.0),
    "k head dim": (dict(k=spec((2, 2, 120, 32))), 0.0),
    "k batch": (dict(k=spec((3, 2, 120, 64))), 0.0),
    "v differs from k": (dict(v=spec((2, 2, 121, 64))), 0.0),
    "o differs from q": (dict(o=spec((2, 8, 99, 64))), 0.0),
    "heads not divisible": (dict(k=spec((2, 3, 120, 64)), v=spec((2, 3, 120, 64))), 0.0),
    "head dim 264": (dict(q=spec((2, 8, 100, 264)), k=spec((2, 2, 120, 264)), v=spec((2, 2, 120, 264)),
                          o=spec((2, 8, 100, 264))), 0.0),
    "lse bf16": (dict(lse=spec(LSE[0], BF16)), 0.0),
    "lse shape": (dict(lse=spec((2, 8, 99), F32)), 0.0),
    "lse 2-d": (dict(lse=spec((16, 100), F32)), 0.0),
    "scale inf": ({}, float("inf")),
    "v head dim above q's": (dict(v=spec((2, 2, 120, 96))), 0.0),
    "o with q's head dim, v's below": (dict(v=spec((2, 2, 120, 32))), 0.0),
}


@pytest.mark.parametrize("case", FORWARD_CASES)
def test_attention_forward_messages(case):
    changes, scale = FORWARD_CASES[case]
    specs = list({**FORWARD, **changes}.values())
    options = _lib.AttentionOptions(scale=scale)
    expected = library_message("kgen_attention_forward", specs, options, None)
    assert python_message("kgen_attention_forward", specs, options) == expected


BACKWARD = {**FORWARD, "d_o": Q, "dq": Q, "dk": KV, "dv": KV}
BACKWARD_CASES = {
    "d_o shape": dict(d_o=spec((2, 8, 100, 32))),
    "d_o dtype": dict(d_o=spec(Q[0], F16)),
    "dq dtype": dict(dq=spec(Q[0], F32)),
    "dk like q": dict(dk=Q),
    "dv 3-d": dict(dv=spec((2, 120, 64))),
    "k head dim": dict(k=spec((2, 2, 120, 32))),
    "v head dim below q's, d_o like q": dict(v=spec((2, 2, 120, 32)), o=spec((2, 8, 100, 32)), dv=spec((2, 2, 120, 32))),
    "v head dim below q's, dv like k": dict(v=spec((2, 2, 120, 32)), o=spec((2, 8, 100, 32)), d_o=spec((2, 8, 100, 32))),
}


@pytest.mark.parametrize("case", BACKWARD_CASES)
def test_attention_backward_messages(case):
    specs = list({**BACKWARD, **BACKWARD_CASES[case]}.values())
    expected = library_message("kgen_attention_backward", specs, _lib.AttentionBackwardOptions(), None)
    assert python_message("kgen_attention_backward", specs, _lib.AttentionBackwardOptions()) == expected


DOUBLE = {**FORWARD, "d_o": Q, "gq": None, "gk": KV, "gv": None, "q_bar": Q, "k_bar": KV, "v_bar": KV, "do_bar": Q}
DOUBLE_CASES = {
    "gk like q": dict(gk=Q),
    "gq dtype": dict(gq=spec(Q[0], F16)),
    "gv shape": dict(gv=spec((2, 2, 119, 64))),
    "do_bar dtype": dict(do_bar=spec(Q[0], F32)),
    "v_bar like q": dict(v_bar=Q),
    "d_o 3-d": dict(d_o=spec((8, 100, 64))),
    "v head dim below q's": dict(v=spec((2, 2, 120, 32)), o=spec((2, 8, 100, 32)), d_o=spec((2, 8, 100, 32))),
}


@pytest.mark.parametrize("case", DOUBLE_CASES)
def test_attention_double_backward_messages(case):
    specs = list({**DOUBLE, **DOUBLE_CASES[case]}.values())
    expected = library_message("kgen_attention_double_backward", specs, _lib.AttentionBackwardOptions(), None)
    assert python_message("kgen_attention_double_backward", specs, _lib.AttentionBackwardOptions()) == expected


# --- LRPE-cosine: x, theta, o (forward), x, theta, d_o, dx (backward), + angles (md) ---------------------

X, THETA = spec((2, 4, 33, 48)), spec((4, 48), F32)
LRPE_FORWARD = dict(x=X, theta=THETA, o=spec((2, 4, 33, 96)))
LRPE_BACKWARD = dict(x=X, theta=THETA, d_o=spec((2, 4, 33, 96)), dx=X)
LRPE_CASES = {  # name: (forward?, changed arguments, offset)
    "x 2-d": (True, dict(x=spec((33, 48))), 0),
    "x 5-d": (True, dict(x=spec((1, 2, 4, 33, 48))), 0),
    "x d 300": (True, dict(x=spec((2, 4, 33, 300)), o=spec((2, 4, 33, 600))), 0),
    "x batch above grid": (True, dict(x=spec((70000, 1, 2, 48)), o=spec((70000, 1, 2, 96))), 0),
    "x last stride 2": (True, dict(x=spec((2, 4, 33, 48), BF16, (4 * 33 * 96, 33 * 96, 96, 2))), 0),
    "theta rows": (True, dict(theta=spec((3, 48), F32)), 0),
    "theta columns": (True, dict(theta=spec((4, 5), F32)), 0),
    "theta fp16": (True, dict(theta=spec((4, 48), F16)), 0),
    "theta 1-d": (True, dict(theta=spec((48,), F32)), 0),
    "theta float64": (True, dict(theta=spec((4, 48), torch.float64)), 0),
    "o width": (True, dict(o=spec((2, 4, 33, 48))), 0),
    "o 3-d": (True, dict(o=spec((2, 33, 96))), 0),
    "o dtype": (True, dict(o=spec((2, 4, 33, 96), F16)), 0),
    "offset": (True, {}, 1 << 24),
    "3-d x, theta of 2 heads": (True, dict(x=spec((2, 33, 48)), theta=spec((2, 48), F32), o=spec((2, 33, 96))), 0),
    "3-d x, o width": (True, dict(x=spec((2, 33, 48)), theta=spec((1, 48), F32), o=spec((2, 33, 95))), 0),
    "d_o width": (False, dict(d_o=spec((2, 4, 33, 48))), 0),
    "d_o 3-d": (False, dict(d_o=spec((2, 33, 96))), 0),
    "dx dtype": (False, dict(dx=spec(X[0], F32)), 0),
    "dx width": (False, dict(dx=spec((2, 4, 33, 96))), 0),
}


@pytest.mark.parametrize("case", LRPE_CASES)
def test_lrpe_messages(case):
    forward, changes, offset = LRPE_CASES[case]
    specs = list({**(LRPE_FORWARD if forward else LRPE_BACKWARD), **changes}.values())
    function = "kgen_lrpe_cosine_forward" if forward else "kgen_lrpe_cosine_backward"
    expected = library_message(function, specs, _lib.LrpeOptions(offset=offset), None)
    assert python_message(function, specs, _lib.LrpeOptions(offset=offset)) == expected


MD_FORWARD = dict(x=X, theta=spec((4, 24), F32), o=spec((2, 4, 33, 96)), angles=None)
MD_CASES = {  # name: (forward?, changed arguments, grid, extra)
    "grid product": (True, {}, (3, 12), 0),
    "grid more than n": (True, {}, (30, 30), 0),
    "grid with extra": (True, {}, (4, 8), 2),
    "no dims": (True, {}, (), 0),
    "grid size 0": (True, {}, (0, 33), 0),
    "negative extra": (True, {}, (3, 11), -1),
    "theta too narrow": (True, dict(theta=spec((4, 20), F32)), (3, 11), 0),
    "theta rows": (True, dict(theta=spec((2, 24), F32)), (3, 11), 0),
    "angles shape": (True, dict(angles=spec((4, 33, 47), F32)), (3, 11), 0),
    "angles dtype": (True, dict(angles=spec((4, 33, 48), BF16)), (3, 11), 0),
    "angles 2-d": (True, dict(angles=spec((4, 33 * 48), F32)), (3, 11), 0),
    "backward grid": (False, {}, (3, 12), 0),
    "backward angles": (False, dict(angles=spec((4, 32, 48), F32)), (3, 11), 0),
}


@pytest.mark.parametrize("case", MD_CASES)
def test_md_lrpe_messages(case):
    forward, changes, grid, extra = MD_CASES[case]
    base = MD_FORWARD if forward else dict(x=X, theta=spec((4, 24), F32), d_o=spec((2, 4, 33, 96)), dx=X, angles=None)
    specs = list({**base, **changes}.values())
    options = _lib.LrpeOptions(dims=len(grid), extra=extra)
    for j, size in enumerate(grid):
        options.grid[j] = size
    function = "kgen_md_lrpe_cosine_forward" if forward else "kgen_md_lrpe_cosine_backward"
    expected = library_message(function, specs, options, None)
    assert python_message(function, specs, options) == expected


def valid(function, specs, options, extra=None):
    _checks.validate(function, [None if s is None else meta(s) for s in specs], False, options, extra)


def test_valid_arguments_pass():
    """Valid calls return OK in validate-only mode, on this machine without a GPU or its driver."""
    valid("kgen_attention_forward", FORWARD.values(), _lib.AttentionOptions())
    valid("kgen_attention_backward", BACKWARD.values(), _lib.AttentionBackwardOptions(scale=0.5))
    valid("kgen_attention_double_backward", DOUBLE.values(), _lib.AttentionBackwardOptions())
    v32, o32 = spec((2, 2, 120, 32)), spec((2, 8, 100, 32))  # v's head dim below q's (MLA)
    valid("kgen_attention_forward", {**FORWARD, "v": v32, "o": o32}.values(), _lib.AttentionOptions())
    valid("kgen_attention_backward", {**BACKWARD, "v": v32, "o": o32, "d_o": o32, "dv": v32}.values(),
          _lib.AttentionBackwardOptions())
    valid("kgen_lrpe_cosine_forward", LRPE_FORWARD.values(), _lib.LrpeOptions(offset=100))
    options = _lib.LrpeOptions(dims=2, extra=0)
    options.grid[0], options.grid[1] = 3, 11
    valid("kgen_md_lrpe_cosine_backward", [X, spec((4, 24), F32), spec((2, 4, 33, 96)), X, spec((4, 33, 48), F32)],
          options)
    assert _lib.function("kgen_validate_only")(0) == 0  # validate left the mode as it found it


def test_validate_only_is_the_launch_path():
    """The same refusal with and without validate-only, and a valid call that only validate-only
    lets through (without it, the device query fails)."""
    tensors = [descriptor(s) for s in FORWARD.values()]
    options = _lib.AttentionOptions()
    run = _lib.function("kgen_attention_forward")
    assert run(*map(_lib.ref, tensors), ctypes.byref(options), None) != Status.OK
    mode = _lib.function("kgen_validate_only")
    assert mode(1) == 0
    try:
        assert run(*map(_lib.ref, tensors), ctypes.byref(options), None) == Status.OK
    finally:
        mode(0)


def test_a_storage_offset_moves_the_address():
    """A view's descriptor carries its offset in bytes: the alignment the library checks is the view's."""
    base = torch.empty(2, 8, 100, 64, dtype=BF16, device="meta")
    assert _checks.descriptor(base).data == _checks.FAKE_ADDRESS
    assert _checks.descriptor(base.view(-1)[3:].view(-1)).data == _checks.FAKE_ADDRESS + 6


def test_the_fake_kernels_ask_the_library():
    """The operators' fake kernels on meta tensors raise the library's sentence (and pass valid calls)."""
    q, k, lse = meta(Q), meta(KV), meta(LSE)
    o, got_lse = torch.ops.kgen.attention_forward(q, k, k)
    assert o.shape == q.shape and got_lse.shape == lse.shape
    expected = library_message("kgen_attention_forward", [Q, spec((2, 3, 120, 64)), spec((2, 3, 120, 64)), Q, LSE],
                               _lib.AttentionOptions(), None)
    k3 = meta(spec((2, 3, 120, 64)))
    with pytest.raises(KgenError, match="^" + re.escape(expected) + "$"):
        torch.ops.kgen.attention_forward(q, k3, k3)
    with pytest.raises(KgenError, match="^" + re.escape(expected) + "$"):
        _ops._fake_attention_backward(q, k3, k3, q, lse, q)


def test_dynamic_shapes_are_checked_at_the_example_without_guards(monkeypatch):
    """torch.compile(dynamic=True): the fake kernel checks the traced example's sizes and adds no
    guard on them, so other sequence lengths reuse the one graph."""
    import kgen.torch
    torch._dynamo.reset()
    asked = []  # the C functions called: the library was asked, not skipped
    function = _lib.function
    monkeypatch.setattr(_lib, "function", lambda name: (asked.append(name), function(name))[1])
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(q, k, v):
        return kgen.torch.attention(q, k, v, causal=True)

    compiled = torch.compile(f, dynamic=True, fullgraph=True, backend=backend)
    for n in (16, 40, 100):
        q, k = meta(spec((1, 8, n, 64))), meta(spec((1, 2, n + 3, 64)))
        assert compiled(q, k, k).shape == q.shape
    assert len(graphs) == 1 and "kgen_validate_only" in asked
    torch._dynamo.reset()


def test_the_paged_forward_fake_asks_the_library():
    """q and o in the bnhd layout, the caches as given: a valid call passes, a page size the
    kernels do not serve is refused with the library's sentence."""
    q = meta(spec((2, 1, 8, 64)))
    table, lens = meta(spec((2, 3), torch.int32)), meta(spec((2,), torch.int32))
    o, lse = torch.ops.kgen.paged_attention_forward(q, meta(spec((8, 16, 2, 64))), meta(spec((8, 16, 2, 64))), table,
                                                    lens)
    assert o.shape == q.shape and lse.shape == (2, 8, 1)
    cache = meta(spec((8, 24, 2, 64)))
    with pytest.raises(KgenError, match=r"^k_cache: page_size 24 must be a power of two from 16 to 256$"):
        torch.ops.kgen.paged_attention_forward(q, cache, cache, table, lens)
