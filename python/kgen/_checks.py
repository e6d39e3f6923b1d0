"""How kgen's C library sees a torch tensor, and its argument checks in Python for the fake kernels.

The fake (meta) implementations of torch.ops.kgen.* run where no kernel runs: at trace time
under torch.compile and in FakeTensorMode. They raise the KgenError the library would raise for
the same call, with the same sentence, so that a wrong shape fails while tracing with the message
an eager call gives. The functions below follow the library's checks in order: `to_view` in
runtime/ops/c_api.cpp (every argument, in parameter order), then runtime/ops/tensor_checks.cpp
with validate_attention_forward, the backward's validate_inputs and check_output
(runtime/ops/attention_backward.cpp) and validate_lrpe (runtime/ops/lrpe.cpp). What needs a
device (alignment of pointers, configs, workspace) is left to the library at run time.
tests/test_checks.py compares every sentence with the library's own.
"""
from __future__ import annotations

import copy
import math
import warnings
from typing import NamedTuple, Sequence

import torch

from . import _lib
from ._lib import KgenError, Status

MAX_GRID_YZ = 65535
MAX_HEAD_DIM = 256  # generator/attention_forward.h kMaxHeadDim, generator/lrpe.h kLrpeMaxHeadDim
MAX_EXACT_POSITION = 1 << 24  # positions stay exact in fp32
_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def dl_dtype(dtype: torch.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a torch dtype as PyTorch's own DLPack export gives it (bool is
    kDLBool, each float8 its own code), so that every path describes a tensor alike; the library
    decides which ones it supports."""
    codes = _DL_DTYPES.get(dtype)
    return codes if codes is not None else _dtype_rule(dtype)


def _exported_dtype(dtype: torch.dtype) -> tuple[int, int] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
            capsule = torch._C._to_dlpack(torch.empty(1, dtype=dtype, device="cpu"))  # owns the DLTensor read below
        t = _lib.DLTensor.from_address(_lib.capsule_address(capsule))
        return t.dtype.code, t.dtype.bits
    except Exception:  # noqa: BLE001 - a dtype DLPack cannot describe, or a PyTorch without the export
        return None


def _dtype_rule(dtype: torch.dtype) -> tuple[int, int]:
    if dtype == getattr(torch, "float8_e4m3fn", None):
        return _lib.kDLFloat8_e4m3fn, 8
    if dtype == torch.bfloat16:
        code = _lib.kDLBfloat
    elif dtype.is_complex:
        code = _lib.kDLComplex
    elif dtype.is_floating_point:
        code = _lib.kDLFloat
    else:
        code = _lib.kDLInt if dtype.is_signed else _lib.kDLUInt
    return code, dtype.itemsize * 8


# Read once, at import (outside any fake or dispatch mode a later call may run under).
_DL_DTYPES = {d: codes for d in {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
              if (codes := _exported_dtype(d)) is not None}

DL_CUDA = _lib.kDLROCM if torch.version.hip else _lib.kDLCUDA


def dl_device(device: torch.device) -> tuple[int, int]:
    """(DLDeviceType, index). A meta tensor stands for device memory: it is what a traced call
    on CUDA tensors sees."""
    if device.type in ("cuda", "meta"):
        return DL_CUDA, device.index or 0
    if device.type == "cpu":
        return _lib.kDLCPU, 0
    return _lib.kDLExtDev, device.index or 0


def invalid(message: str):
    raise KgenError(message, Status.INVALID_ARGUMENT)


def shape_text(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


class View:
    """The library's TensorView of a tensor argument: its (b, h, n, ·) view when `swap` (4-d
    tensors given in the bnhd layout), else the tensor as given."""

    def __init__(self, t: torch.Tensor, name: str, swap: bool = False):
        self.name, self.dtype = name, t.dtype
        self.shape, self.strides = tuple(t.shape), tuple(t.stride())
        if swap and len(self.shape) == 4:
            self.shape = (self.shape[0], self.shape[2], self.shape[1], self.shape[3])
            self.strides = (self.strides[0], self.strides[2], self.strides[1], self.strides[3])
        self.device_type, self.device = dl_device(t.device)
        self.ndim = len(self.shape)


def views(named: dict, swap: bool) -> dict:
    """Views of the given arguments (None stays None) after c_api.cpp's to_view checks, in order."""
    out = {}
    for name, t in named.items():
        if t is None:
            out[name] = None
            continue
        v = out[name] = View(t, name, swap)
        if v.dtype not in _NAMES:
            code, bits = dl_dtype(v.dtype)
            invalid(f"{name}: dtype (code {code}, {bits} bits) is not float16, bfloat16 or float32")
        if v.device_type != _lib.kDLCUDA:
            invalid(f"{name}: tensor is not in CUDA device memory (DLPack device type {v.device_type})")
        if not 1 <= v.ndim <= 4:
            invalid(f"{name}: {v.ndim} dimensions are not supported")
    return out


# --- runtime/ops/tensor_checks.cpp ----------------------------------------------------------------

def check_view(t: View, ndim: int) -> None:
    n = t.name
    if t.ndim != ndim:
        invalid(f"{n}: expected {ndim} dimensions, got {t.ndim} {shape_text(t.shape)}")
    for i in range(ndim):
        if t.shape[i] <= 0:
            why = "sizes must be positive" if t.shape[i] else "empty tensors are not supported"
            invalid(f"{n}: dimension {i} is {t.shape[i]} ({why})")
        if t.strides[i] < 0:
            invalid(f"{n}: negative strides are not supported")
    if t.shape[-1] > 1 and t.strides[-1] != 1:
        invalid(f"{n}: the last dimension must be contiguous (stride 1), got stride {t.strides[-1]}")


def check_tensor(t: View, ndim: int) -> None:
    check_view(t, ndim)
    if t.shape[0] > MAX_GRID_YZ or t.shape[1] > MAX_GRID_YZ or t.shape[2] > (1 << 31) - 1:
        invalid(f"{t.name}: shape {shape_text(t.shape)} exceeds kgen's launch limits (batch, heads <= 65535, n < 2^31)")


def check_like(t: View, ref: View) -> None:
    if t.dtype != ref.dtype:
        invalid(f"{t.name}: dtype {_NAMES[t.dtype]} differs from {ref.name}'s {_NAMES[ref.dtype]}")
    if t.device != ref.device:
        invalid(f"{t.name}: on device {t.device}, {ref.name} is on device {ref.device}")
    if t.shape != ref.shape:
        invalid(f"{t.name}: shape {shape_text(t.shape)} differs from {ref.name} {shape_text(ref.shape)}")


# --- attention -----------------------------------------------------------------------------------

def _attention_forward(q: View, k: View, v: View, o: View, lse: View | None, scale: float) -> None:
    """validate_attention_forward (runtime/ops/attention_forward.cpp)."""
    for t in (q, k, v, o):
        check_tensor(t, 4)
    for t in (k, v, o):
        if t.dtype != q.dtype:
            invalid(f"{t.name}: dtype {_NAMES[t.dtype]} differs from q's {_NAMES[q.dtype]}")
    for t in (k, v, o):
        if t.device != q.device:
            invalid(f"{t.name}: on device {t.device}, q is on device {q.device}")
    b, hq, nq, d = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    if k.shape[0] != b or k.shape[3] != d:
        invalid(f"k: shape {shape_text(k.shape)} does not match q {shape_text(q.shape)} in batch or head_dim")
    if v.shape[:3] != k.shape[:3]:
        invalid(f"v: shape {shape_text(v.shape)} differs from k {shape_text(k.shape)}")
    if dv > d or dv < 1:
        invalid(f"v: head dim {dv} must be at most q's {d} (d_v <= d_qk)")
    if o.shape != (b, hq, nq, dv):
        invalid(f"o: shape {shape_text(o.shape)} differs from q {shape_text(q.shape)}" if dv == d else
                f"o: shape {shape_text(o.shape)} must be q's (b, h_q, n_q) with v's head dim {dv}")
    if hq % hkv:
        invalid(f"k: heads_kv={hkv} does not divide q's heads={hq}")
    if d > MAX_HEAD_DIM:
        invalid(f"q: head_dim={d} is unsupported (kgen serves head_dim <= {MAX_HEAD_DIM})")
    if lse is not None:
        check_tensor(lse, 3)
        if lse.dtype != torch.float32:
            invalid("lse: dtype must be fp32")
        if lse.shape != (b, hq, nq):
            invalid(f"lse: shape {shape_text(lse.shape)} must be (batch, heads_q, n_q) of q")
        if lse.device != q.device:
            invalid("lse: not on q's device")
    if not math.isfinite(scale):
        invalid("scale: must be finite")


def attention_forward(q, k, v, o, lse, scale: float, swap: bool) -> None:
    """kgen_attention_forward's checks (lse may be None)."""
    a = views(dict(q=q, k=k, v=v, o=o, lse=lse), swap)
    _attention_forward(a["q"], a["k"], a["v"], a["o"], a["lse"], scale)


def _gradient_inputs(a: dict, scale: float) -> None:
    """validate_inputs (runtime/ops/attention_backward.cpp): the forward's checks, then d_o like q (like o
    when v has a head dim of its own)."""
    _attention_forward(a["q"], a["k"], a["v"], a["o"], a["lse"], scale)
    check_tensor(a["d_o"], 4)
    check_like(a["d_o"], a["o"] if _own_v(a) else a["q"])


def _own_v(a: dict) -> bool:
    """Whether v's head dim differs from q's (MLA: d_v < d_qk)."""
    return a["v"].shape[3] != a["q"].shape[3]


def _variant_given(v) -> bool:
    """variant_requested (runtime/ops/attention_variant.cpp): any field away from plain attention."""
    return (v.causal_top_left or v.window_left != -1 or v.window_right != -1 or v.softcap != 0 or
            v.alibi_slopes is not None or v.prefix != -1 or v.chunk != 0 or v.document_ids is not None or
            v.sinks is not None or bool(v.score_mod) or bool(v.mask_mod) or len(v.scalar_names) > 0 or
            len(v.tensors) > 0)


def _own_v_refused(a: dict, what: str) -> None:
    """check_head_dim_v's refusal (generator/attention_forward.cpp) of a v head dim of its own in `what`."""
    if _own_v(a):
        dv, d = a["v"].shape[3], a["q"].shape[3]
        if what == "double":
            invalid(f"v: head dim {dv} differs from q's {d}; the double backward takes one head dim for q, k and v "
                    f"(not available yet for d_v < d_qk)")
        invalid(f"v: head dim {dv} differs from q's {d}; attention serves that for plain and causal attention only, "
                f"not with a variant, sinks, packed batches or paged K/V")


def _gradient_output(a: dict, name: str, like: str) -> None:
    check_tensor(a[name], 4)
    check_like(a[name], a[like])


def attention_backward(q, k, v, o, lse, d_o, dq, dk, dv, scale: float, swap: bool) -> None:
    """kgen_attention_backward's checks."""
    a = views(dict(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=dq, dk=dk, dv=dv), swap)
    _gradient_inputs(a, scale)
    for name, like in (("dq", "q"), ("dk", "k"), ("dv", "v" if _own_v(a) else "k")):
        _gradient_output(a, name, like)


def attention_double_backward(q, k, v, o, lse, d_o, gq, gk, gv, q_bar, k_bar, v_bar, do_bar, scale: float,
                              swap: bool) -> None:
    """kgen_attention_double_backward's checks (gq, gk, gv may be None)."""
    a = views(dict(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, gq=gq, gk=gk, gv=gv, q_bar=q_bar, k_bar=k_bar,
                   v_bar=v_bar, do_bar=do_bar), swap)
    _gradient_inputs(a, scale)
    if _own_v(a):
        _own_v_refused(a, "double")
    for name, like in (("gq", "q"), ("gk", "k"), ("gv", "k"), ("q_bar", "q"), ("k_bar", "k"), ("v_bar", "k"),
                       ("do_bar", "q")):
        if a[name] is not None:
            _gradient_output(a, name, like)


# --- attention variants (runtime/ops/c_api.cpp convert_variant, runtime/ops/attention_variant.cpp) ---

class Variant(NamedTuple):
    """An attention variant as torch.ops.kgen.attention_forward_variant takes it: the fields of
    kgen_attention_variant (c_api.h) in its order, scalars as three lists and tensors as two."""
    causal_top_left: bool = False
    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0
    alibi_slopes: torch.Tensor | None = None
    prefix: int = -1
    chunk: int = 0
    document_ids: torch.Tensor | None = None
    sinks: torch.Tensor | None = None
    score_mod: str | None = None
    mask_mod: str | None = None
    scalar_names: Sequence[str] = ()
    scalar_values: Sequence[float] = ()
    scalar_integer: Sequence[bool] = ()
    tensor_names: Sequence[str] = ()
    tensors: Sequence[torch.Tensor] = ()


_VARIANT_NAMES = {**_NAMES, torch.int32: "int32"}
_MAX_VARIANT_INTEGER = 1 << 30


def _variant_view(t: torch.Tensor, name: str, index_ok: bool) -> View:
    """to_view (c_api.cpp) of a variant tensor: as given (no layout swap); `index_ok` accepts int32."""
    v = View(t, name)
    if v.dtype not in _NAMES and not (index_ok and v.dtype == torch.int32):
        code, bits = dl_dtype(v.dtype)
        kinds = "float16, bfloat16, float32 or int32" if index_ok else "float16, bfloat16 or float32"
        invalid(f"{name}: dtype (code {code}, {bits} bits) is not {kinds}")
    if v.device_type != _lib.kDLCUDA:
        invalid(f"{name}: tensor is not in CUDA device memory (DLPack device type {v.device_type})")
    if not 1 <= v.ndim <= 4:
        invalid(f"{name}: {v.ndim} dimensions are not supported")
    for i, size in enumerate(v.shape):
        if size <= 0:
            why = "sizes must be positive" if size else "empty tensors are not supported"
            invalid(f"{name}: dimension {i} is {size} ({why})")
    return v


def _variant_views(variant: Variant, sinks_grad=None, tensor_grads=()) -> dict:
    """The variant's tensors converted in kgen_attention_variant's order (None stays None), with
    the backward's gradient buffers: sinks_grad and tensor_grads[i] of variant.tensors[i]."""
    out = {}
    for field, index_ok in (("alibi_slopes", False), ("document_ids", True), ("sinks", False)):
        t = getattr(variant, field)
        out[field] = None if t is None else _variant_view(t, f"variant.{field}", index_ok)
    out["sinks_grad"] = None if sinks_grad is None else _variant_view(sinks_grad, "variant.sinks_grad", False)
    out["tensors"], out["grads"] = [], []
    grads = list(tensor_grads) + [None] * (len(variant.tensors) - len(tensor_grads))
    for name, t, grad in zip(variant.tensor_names, variant.tensors, grads):
        out["tensors"].append(_variant_view(t, f"variant.tensors[{name}]", True))
        out["grads"].append(None if grad is None else _variant_view(grad, f"variant.tensors[{name}].grad", False))
    return out


def _variant_tensor(t: View, dtype: torch.dtype, ndim: int, q: View) -> None:
    """check_variant_tensor (runtime/ops/attention_variant.cpp), less the pointer checks."""
    if t.device != q.device:
        invalid(f"{t.name}: on device {t.device}, q is on device {q.device}")
    if t.dtype != dtype:
        invalid(f"{t.name}: dtype {_VARIANT_NAMES[t.dtype]} must be {_VARIANT_NAMES[dtype]}")
    if t.ndim != ndim:
        invalid(f"{t.name}: expected {ndim} dimensions, got {t.ndim} {shape_text(t.shape)}")
    if any(s < 0 for s in t.strides):
        invalid(f"{t.name}: negative strides are not supported")


def _variant_shape(t: View, want: tuple, meaning: str) -> None:
    if t.shape != want:
        invalid(f"{t.name}: shape {shape_text(t.shape)} must be {meaning} = {shape_text(want)}")


def _variant_range(name: str, x: int, low: int) -> None:
    if not low <= x <= _MAX_VARIANT_INTEGER:
        invalid(f"variant.{name}: {x} must be in [{low}, 2^30]")


def _contiguous(t: View) -> bool:
    expect = 1
    for size, stride in reversed(list(zip(t.shape, t.strides))):
        if size > 1 and stride != expect:
            return False
        expect *= size
    return True


def _variant(variant: Variant, views: dict, q: View, k: View, learnable=None) -> None:
    """resolve_attention_variant's checks (runtime/ops/attention_variant.cpp) of a forward, or of a
    backward with `learnable` (one flag per tensor), in its order; what needs the expression
    parser (names, types, syntax) is left to the library."""
    backward = learnable is not None
    batch, heads_q, n_k = q.shape[0], q.shape[1], k.shape[2]
    left, right = variant.window_left, variant.window_right
    requested = (variant.causal_top_left or left >= 0 or right >= 0 or variant.softcap != 0 or
                 variant.alibi_slopes is not None or variant.prefix >= 0 or variant.chunk != 0 or
                 variant.document_ids is not None or variant.sinks is not None or variant.score_mod or
                 variant.mask_mod or variant.scalar_names or variant.tensor_names)
    if not requested:  # variant_requested: plain attention, nothing else is read
        return
    if left >= 0 or right >= 0:
        _variant_range("window_left", left, -1)
        _variant_range("window_right", right, -1)
    elif left < -1 or right < -1:
        invalid(f"variant.window_left: -1 (open) or a key count >= 0, got {min(left, right)}")
    if variant.softcap != 0 and not (variant.softcap > 0 and math.isfinite(variant.softcap)):
        invalid(f"variant.softcap: must be a finite number > 0 (or 0 for none), got {variant.softcap:f}")
    if views["alibi_slopes"] is not None:
        _variant_tensor(views["alibi_slopes"], torch.float32, 1, q)
        _variant_shape(views["alibi_slopes"], (heads_q,), "(heads_q)")
    if variant.prefix != -1:
        _variant_range("prefix", variant.prefix, 0)
    if variant.chunk != 0:
        _variant_range("chunk", variant.chunk, 1)
    if views["document_ids"] is not None:
        if q.shape[2] > n_k:
            invalid(f"variant.document_ids: needs n_q <= n_k (query q is key q + n_k - n_q), got n_q={q.shape[2]} "
                    f"and n_k={n_k}")
        _variant_tensor(views["document_ids"], torch.int32, 2, q)
        _variant_shape(views["document_ids"], (batch, n_k), "(batch, n_k)")
    sinks = views["sinks"]
    if sinks is not None:
        _variant_tensor(sinks, torch.float32, 1, q)
        _variant_shape(sinks, (heads_q,), "(heads_q)")
        if sinks.shape[0] > 1 and sinks.strides[0] != 1:
            invalid("variant.sinks: must be contiguous")
        if backward:
            grad = views["sinks_grad"]
            if grad is None:
                invalid("variant.sinks_grad: the backward of a call with sinks needs sinks_grad")
            _variant_tensor(grad, torch.float32, 1, q)
            _variant_shape(grad, (heads_q,), "(heads_q)")
            if grad.shape[0] > 1 and grad.strides[0] != 1:
                invalid("variant.sinks_grad: must be contiguous")
    for name, value, integer in zip(variant.scalar_names, variant.scalar_values, variant.scalar_integer):
        if not math.isfinite(value):
            invalid(f"variant.scalars[{name}]: value must be finite")
        if integer and (value != math.floor(value) or abs(value) > 2147483647.0):
            invalid(f"variant.scalars[{name}]: an integer scalar needs an integral value within int32, got {value:f}")
    learnable = learnable or (False,) * len(views["tensors"])
    for t, learns in zip(views["tensors"], learnable):
        if t.dtype not in (torch.float32, torch.int32):
            invalid(f"{t.name}: dtype {_NAMES[t.dtype]} must be fp32 or int32")
        _variant_tensor(t, t.dtype, t.ndim, q)
        if learns and t.dtype != torch.float32:
            invalid(f"{t.name}: a learnable tensor must be fp32")
    presets = (variant.causal_top_left or left >= 0 or right >= 0 or variant.softcap != 0 or
               views["alibi_slopes"] is not None or variant.prefix != -1 or variant.chunk != 0 or
               views["document_ids"] is not None)
    if not (variant.score_mod or variant.mask_mod or presets) and (variant.scalar_names or variant.tensor_names):
        invalid("variant.scalars: inputs were given but no score_mod or mask_mod reads them")
    if not backward:
        return
    for t, grad in zip(views["tensors"], views["grads"]):
        if grad is None:  # not learnable
            continue
        name = f"{t.name}.grad"
        _variant_tensor(grad, torch.float32, t.ndim, q)
        if grad.shape != t.shape:
            invalid(f"{name}: shape {shape_text(grad.shape)} must be the tensor's {shape_text(t.shape)}")
        if not _contiguous(grad):
            invalid(f"{name}: must be contiguous")


def attention_forward_variant(q, k, v, o, lse, scale: float, swap: bool, variant: Variant) -> None:
    """kgen_attention_forward_variant's checks (lse may be None)."""
    a = views(dict(q=q, k=k, v=v, o=o, lse=lse), swap)
    variant_views = _variant_views(variant)
    _attention_forward(a["q"], a["k"], a["v"], a["o"], a["lse"], scale)
    _variant(variant, variant_views, a["q"], a["k"])
    if _variant_given(variant):
        _own_v_refused(a, "variant")


def attention_backward_variant(q, k, v, o, lse, d_o, dq, dk, dv, scale: float, swap: bool, variant: Variant,
                               sinks_grad, tensor_grads) -> None:
    """kgen_attention_backward_variant's checks: tensor_grads[i] is the gradient buffer of
    variant.tensors[i], which learns if it is not None."""
    a = views(dict(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=dq, dk=dk, dv=dv), swap)
    variant_views = _variant_views(variant, sinks_grad, tensor_grads)
    _gradient_inputs(a, scale)
    learnable = [g is not None for g in variant_views["grads"]]
    _variant(variant, variant_views, a["q"], a["k"], learnable)
    if _variant_given(variant):
        _own_v_refused(a, "variant")
    for name, like in (("dq", "q"), ("dk", "k"), ("dv", "k")):
        _gradient_output(a, name, like)


# --- LRPE-cosine (runtime/ops/lrpe.cpp validate_lrpe) ---------------------------------------------

def _logical4(t: View) -> View:
    """The (b, h, n, width) view of a 4-d tensor, or of a 3-d (b, n, width) one as one head."""
    if t.ndim == 4:
        check_view(t, 4)
        return t
    check_view(t, 3)
    v = copy.copy(t)
    s, st = t.shape, t.strides
    v.shape, v.strides, v.ndim = (s[0], 1, s[1], s[2]), (st[0], 0, st[1], st[2]), 4
    return v


def _lrpe_like(t: View, x: View, width: int, what: str) -> None:
    if t.shape[:3] != x.shape[:3] or t.shape[3] != width:
        invalid(f"{t.name}: shape {shape_text(t.shape)} must be {what} (x is {shape_text(x.shape)})")
    if t.dtype != x.dtype:
        invalid(f"{t.name}: dtype {_NAMES[t.dtype]} differs from x's {_NAMES[x.dtype]}")
    if t.device != x.device:
        invalid(f"{t.name}: on device {t.device}, x is on device {x.device}")


def lrpe(x, theta, d_o, out, angles, *, md: bool, offset: int = 0, grid=(), extra: int = 0, swap: bool) -> None:
    """The checks of kgen_lrpe_cosine_forward (d_o None, out = o), kgen_lrpe_cosine_backward
    (out = dx) and their md_lrpe_cosine counterparts (grid and extra; angles may be None)."""
    forward = d_o is None
    out_name = "o" if forward else "dx"
    named = {"x": x, "theta": theta}  # in the C function's parameter order
    if not forward:
        named["d_o"] = d_o
    named[out_name] = out
    if md:
        named["angles"] = angles
    a = views(named, swap)
    x_in, t = a["x"], a["theta"]
    if x_in.ndim not in (3, 4):
        invalid(f"x: expected (batch, heads, n, d) or (batch, n, d), got {x_in.ndim} dimensions")
    x_shape = shape_text(x_in.shape)
    x = _logical4(x_in)
    b, h, n, d = x.shape
    if d > MAX_HEAD_DIM:
        invalid(f"x: head dim d={d} is unsupported (kgen serves d <= {MAX_HEAD_DIM})")
    if b > MAX_GRID_YZ or h > MAX_GRID_YZ or n >= 1 << 31:
        invalid(f"x: shape {x_shape} exceeds kgen's launch limits (batch, heads <= 65535, n < 2^31)")
    if not forward:
        g = a["d_o"]
        if g.ndim != x_in.ndim:
            invalid(f"d_o: has {g.ndim} dimensions, x has {x_in.ndim}")
        _lrpe_like(_logical4(g), x, 2 * d, "x's with 2d features")
    o = a[out_name]
    if o.ndim != x_in.ndim:
        invalid(f"{out_name}: has {o.ndim} dimensions, x has {x_in.ndim}")
    _lrpe_like(_logical4(o), x, 2 * d if forward else d, "x's with 2d features" if forward else "x's")
    if t.ndim != 2:
        invalid(f"theta: expected 2 dimensions (heads or 1, features), got {t.ndim}")
    if t.dtype != torch.float32:
        invalid(f"theta: dtype must be fp32, got {_NAMES[t.dtype]}")
    if t.device != x.device:
        invalid("theta: not on x's device")
    if t.strides[0] < 0 or t.strides[1] < 0:
        invalid("theta: negative strides are not supported")
    if t.shape[0] not in (1, h):
        invalid(f"theta: shape {shape_text(t.shape)} must have 1 or heads={h} rows")
    if not md:
        if t.shape[1] not in (1, d):
            invalid(f"theta: shape {shape_text(t.shape)} must have 1 or d={d} columns")
        if abs(offset) >= MAX_EXACT_POSITION - n:
            invalid(f"offset: |offset| + n must stay below 2^24 (positions are exact fp32 integers), got offset "
                    f"{offset} with n={n}")
        return
    _md_lrpe(a["angles"], t, x, grid, extra)


def _md_lrpe(angles: View | None, theta: View, x: View, grid, extra: int) -> None:
    _, h, n, d = x.shape
    dims = len(grid)
    if not 1 <= dims <= 3:
        invalid(f"dims: the grid must have 1, 2 or 3 dimensions, got {dims}")
    if extra < 0:
        invalid(f"extra: the number of extra tokens l must be >= 0, got {extra}")
    cells, sizes = 1, []
    for j, size in enumerate(grid):
        if not 1 <= size < MAX_EXACT_POSITION:
            invalid(f"grid: size {size} of dim {j} must be in 1..2^24")
        cells *= size
        if cells > n:
            break
        sizes.append(str(size))
    if extra + cells != n:
        invalid(f"grid: l + Π grid = {extra} + {'more than n' if cells > n else '×'.join(sizes)} must equal x's n={n}")
    e = theta.shape[1]
    if e * dims < d:
        invalid(f"theta: e={e} frequencies per dim × m={dims} dims must cover d={d}")
    if angles is None:
        return
    check_view(angles, 3)
    if angles.dtype != torch.float32:
        invalid(f"angles: dtype must be fp32, got {_NAMES[angles.dtype]}")
    if angles.device != x.device:
        invalid("angles: not on x's device")
    if angles.shape != (h, n, d) or angles.strides[1] != d or angles.strides[0] != n * d:
        invalid(f"angles: must be a contiguous fp32 (heads, n, d) = ({h}, {n}, {d}) tensor, got "
                f"{shape_text(angles.shape)}")
