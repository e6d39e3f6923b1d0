"""torch.ops.kgen.*: kgen's operators in PyTorch's dispatcher, registered on import.

Each operator has a fixed arity and is registered with `torch.library.Library("kgen", "DEF")`:
`define`, the CUDA kernel of _kernels.py (also for CPU tensors, which the library refuses with
its own message), a fake kernel that gives the outputs' shapes and dtypes and raises the
library's error for invalid arguments at trace time (the library's own checks, asked through
_checks.validate), and for the forward operators
an autocast kernel. `define` + `impl` costs less per call than `torch.library.custom_op`.
Autograd is not registered: kgen.torch's autograd Functions call these operators, so
torch.compile traces them as leaves of the forward and backward graphs.

    attention_forward(q, k, v, scale=None, causal=False, layout="bhnd") -> (o, lse)
    attention_forward_out(q, k, v, out!, lse!?, scale, causal, layout) -> ()
    attention_backward(q, k, v, o, lse, d_o, scale, causal, layout, deterministic, config) -> (dq, dk, dv)
    attention_backward_out(q, k, v, o, lse, d_o, dq!, dk!, dv!, scale, causal, layout, deterministic, config) -> ()
    attention_double_backward(q, k, v, o, lse, d_o, gq?, gk?, gv?, scale, causal, layout, deterministic,
                              config) -> (q_bar, k_bar, v_bar, do_bar)
    attention_forward_variant(q, k, v, scale, causal, layout, <variant>) -> (o, lse)
    attention_forward_variant_out(q, k, v, out!, lse!?, scale, causal, layout, <variant>) -> ()
    attention_backward_variant(q, k, v, o, lse, d_o, scale, causal, layout, deterministic, config,
                               tensor_learnable?, <variant>) -> (dq, dk, dv, sinks_grad, tensor_grads[])
    attention_double_backward_variant(q, k, v, o, lse, d_o, gq?, gk?, gv?, scale, causal, layout,
                                      deterministic, config, <variant>) -> (q_bar, k_bar, v_bar, do_bar)
    varlen_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal,
                             <variant>) -> (o, lse)
    paged_attention_forward(q, k_cache, v_cache, block_table, cache_seqlens?, scale, causal, layout="bnhd",
                            <variant>) -> (o, lse)
    paged_append(k, v, k_cache!, v_cache!, block_table?, cache_seqlens, rotary_cos?, rotary_sin?,
                 rotary_interleaved=False, q!?, q_out!?, q_sequential=True, layout="bnhd") -> ()
    varlen_attention_backward(q, k, v, o, lse, d_o, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                              causal, deterministic, tensor_learnable?, <variant>) -> (dq, dk, dv, sinks_grad,
                              tensor_grads[])
    varlen_attention_double_backward(q, k, v, o, lse, d_o, gq?, gk?, gv?, cu_seqlens_q, cu_seqlens_k,
                                     max_seqlen_q, max_seqlen_k, scale, causal, deterministic, config,
                                     <variant>) -> (q_bar, k_bar, v_bar, do_bar)
    lrpe_cosine_forward(x, theta, offset=0, act="none", layout="bhnd", config=None) -> o
    lrpe_cosine_backward(x, theta, d_o, offset, act, layout, config) -> dx
    md_lrpe_cosine_forward(x, theta, grid, extra=0, act="none", layout="bhnd", config=None) -> o
    md_lrpe_cosine_forward_cached(x, theta, grid, extra, act, layout, config) -> (o, angles)
    md_lrpe_cosine_backward(x, theta, d_o, angles?, grid, extra, act, layout, config) -> dx

Attention tensors are (b, h, n, d) for layout "bhnd" or (b, n, h, d) for "bnhd" (any strides
with a contiguous last dim), LRPE tensors also (b, n, d). scale None means 1/sqrt(d). act is the
library's name: none, relu, sigmoid, silu, softmax (over the features) or softmax_seq (over the
sequence). <variant> is an attention variant, the fields of c_api.h's kgen_attention_variant
in its order (_checks.Variant): causal_top_left=False, window_left=-1,
window_right=-1, softcap=0.0, alibi_slopes?, prefix=-1, chunk=0, document_ids?, sinks?,
score_mod?, mask_mod?, str[]? scalar_names, float[]? scalar_values, bool[]? scalar_integer,
str[]? tensor_names, Tensor[]? tensors (None = none). attention_backward_variant's bool[]?
tensor_learnable flags, one per tensor, those that get a gradient (fp32 ones; None = none):
tensor_grads holds theirs in order (fp32, each tensor's shape, contiguous); sinks_grad is fp32 (h_q) with sinks, else an
empty (0,) tensor. theta is float32 (h or 1, d or 1), or (h or 1, e) for md. config None lets kgen
choose. Outputs are allocated like the tensor they mirror (o like q, dk like k); lse is float32
(b, h, n_q); angles float32 (h, n, d). `!` marks a written argument, `?` an optional one.

Under torch.autocast("cuda"), the forward operators cast their floating q, k, v or x (never
theta) to the autocast dtype, as SDPA does, and run in it.
"""
from __future__ import annotations

import ctypes

import torch

from . import _checks, _lib
from . import _kernels as K

_LIB = torch.library.Library("kgen", "DEF")
_ATTENTION = 'float? scale=None, bool causal=False, str layout="bhnd"'
_GRADIENT = _ATTENTION + ", bool deterministic=False, str? config=None"
_LRPE = 'str act="none", str layout="bhnd", str? config=None'
# _checks.Variant's fields, in its order (test_ops.py checks that they agree)
_VARIANT = ("bool causal_top_left=False, int window_left=-1, int window_right=-1, float softcap=0.0, "
            "Tensor? alibi_slopes=None, int prefix=-1, int chunk=0, Tensor? document_ids=None, Tensor? sinks=None, "
            "str? score_mod=None, str? mask_mod=None, str[]? scalar_names=None, float[]? scalar_values=None, "
            "bool[]? scalar_integer=None, str[]? tensor_names=None, Tensor[]? tensors=None")
_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)


def autocast(*tensors):
    """`tensors` as the autocast kernels run them: under torch.autocast("cuda"), floating CUDA
    tensors other than float64 in the autocast dtype (SDPA's lower-precision policy); else as given."""
    if not torch.is_autocast_enabled("cuda"):
        return tensors
    dtype = torch.get_autocast_dtype("cuda")
    return tuple(_cast(t, dtype) for t in tensors)


def _cast(t, dtype):
    eligible = t is not None and t.is_floating_point() and t.is_cuda and t.dtype != torch.float64
    return t.to(dtype) if eligible and t.dtype != dtype else t


def _register(schema: str, kernel, fake, cast: tuple = ()) -> None:
    """Define the operator of `schema` with its CUDA (and CPU) kernel, its fake kernel and, if
    `cast` names argument positions, an autocast kernel casting those arguments."""
    name = schema[:schema.index("(")]
    _LIB.define(schema)
    for key in ("CUDA", "CPU"):
        _LIB.impl(name, kernel, key)
    torch.library.register_fake(f"kgen::{name}", fake, lib=_LIB)
    if not cast:
        return
    op = getattr(torch.ops.kgen, name).default

    def autocast_kernel(*args, **kwargs):
        args = list(args)
        dtype = torch.get_autocast_dtype("cuda")
        for i in cast:
            args[i] = _cast(args[i], dtype)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*args, **kwargs)

    _LIB.impl(name, autocast_kernel, "AutocastCUDA")
    op.py_impl(torch._C.DispatchKey.AutocastCUDA)(autocast_kernel)  # the same under make_fx's Python dispatcher


# --- attention -----------------------------------------------------------------------------------

def _forward_options(scale, causal):
    return _lib.AttentionOptions(K._scale(scale), int(causal))


def _gradient_options(scale, causal, deterministic, config):
    return _lib.AttentionBackwardOptions(K._scale(scale), int(causal), int(deterministic), None, 0,
                                         config.encode() if config else None)


def _variant_argument(variant, sinks_grad=None, tensor_grads=(), sequences=None):
    """_checks.validate's `extra` of a call taking a variant (after the packed batch's sequences,
    (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k), when given), built as the kernel builds it."""
    def extra():
        c, keep = K._variant_struct(variant, sinks_grad, tensor_grads, _checks.descriptor)
        if sequences is None:
            return (ctypes.addressof(c),), (c, keep)
        packed = K._sequences(*sequences, _checks.descriptor, _checks.example_int)
        return (ctypes.addressof(packed[0]), ctypes.addressof(c)), (c, keep, packed)
    return extra


def _fake_attention_forward_out(q, k, v, out, lse, scale=None, causal=False, layout="bhnd"):
    _checks.validate("kgen_attention_forward", (q, k, v, out, lse), K._swap(layout), _forward_options(scale, causal))


def _fake_attention_forward(q, k, v, scale=None, causal=False, layout="bhnd"):
    o, lse = K._forward_outputs(q, K._swap(layout), True, v)
    _fake_attention_forward_out(q, k, v, o, lse, scale, causal, layout)
    return o, lse


def _fake_attention_backward_out(q, k, v, o, lse, d_o, dq, dk, dv, scale=None, causal=False, layout="bhnd",
                                 deterministic=False, config=None):
    _checks.validate("kgen_attention_backward", (q, k, v, o, lse, K._dense(d_o), dq, dk, dv), K._swap(layout),
                     _gradient_options(scale, causal, deterministic, config))


def _fake_attention_backward(q, k, v, o, lse, d_o, scale=None, causal=False, layout="bhnd", deterministic=False,
                             config=None):
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _fake_attention_backward_out(q, k, v, o, lse, d_o, dq, dk, dv, scale, causal, layout, deterministic, config)
    return dq, dk, dv


def _fake_attention_double_backward(q, k, v, o, lse, d_o, gq, gk, gv, scale=None, causal=False, layout="bhnd",
                                    deterministic=False, config=None, *variant, **named):
    """Also the fake of attention_double_backward_variant (with the variant's fields)."""
    outputs = K._double_backward_outputs(q, k, v, o)
    extra = _variant_argument(K._variant(variant, named)) if variant or named else None
    _checks.validate("kgen_attention_double_backward_variant" if extra else "kgen_attention_double_backward",
                     (q, k, v, o, lse, *map(K._dense, (d_o, gq, gk, gv)), *outputs), K._swap(layout),
                     _gradient_options(scale, causal, deterministic, config), extra)
    return outputs


def _fake_attention_forward_variant_out(q, k, v, out, lse, scale=None, causal=False, layout="bhnd", *variant,
                                        **named):
    _checks.validate("kgen_attention_forward_variant", (q, k, v, out, lse), K._swap(layout),
                     _forward_options(scale, causal), _variant_argument(K._variant(variant, named)))


def _fake_attention_forward_variant(q, k, v, scale=None, causal=False, layout="bhnd", *variant, **named):
    o, lse = K._forward_outputs(q, K._swap(layout), True, v)
    _fake_attention_forward_variant_out(q, k, v, o, lse, scale, causal, layout, *variant, **named)
    return o, lse


def _fake_variant_backward(function, q, k, v, o, lse, d_o, options, tensor_learnable, variant, named, swap=False,
                           sequences=None):
    """The outputs of a variant's backward (dense or, with `sequences`, packed), its call validated."""
    variant = K._variant(variant, named)
    learnable = K._learnable(variant, tensor_learnable)
    dq, dk, dv, sinks_grad, grads = K._variant_backward_outputs(q, k, v, variant, learnable)
    extra = _variant_argument(variant, None if variant.sinks is None else sinks_grad,
                              K._tensor_grads(learnable, grads), sequences)
    _checks.validate(function, (q, k, v, o, lse, K._dense(d_o), dq, dk, dv), swap, options, extra)
    return dq, dk, dv, sinks_grad, grads


def _fake_attention_backward_variant(q, k, v, o, lse, d_o, scale=None, causal=False, layout="bhnd",
                                     deterministic=False, config=None, tensor_learnable=None, *variant, **named):
    return _fake_variant_backward("kgen_attention_backward_variant", q, k, v, o, lse, d_o,
                                  _gradient_options(scale, causal, deterministic, config), tensor_learnable, variant,
                                  named, K._swap(layout))


_register(f"attention_forward(Tensor q, Tensor k, Tensor v, {_ATTENTION}) -> (Tensor, Tensor)",
          K.attention_forward, _fake_attention_forward, cast=(0, 1, 2))
_register(f"attention_forward_out(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor(b!)? lse, {_ATTENTION}) -> ()",
          K.attention_forward_out, _fake_attention_forward_out)
_register(f"attention_forward_variant(Tensor q, Tensor k, Tensor v, {_ATTENTION}, {_VARIANT}) -> (Tensor, Tensor)",
          K.attention_forward_variant, _fake_attention_forward_variant, cast=(0, 1, 2))
def _fake_varlen_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None,
                                   causal=False, *variant, **named):
    """Shapes of a packed forward, its call validated (a packed batch's bounds live on the GPU: the
    library reads them, under KGEN_CHECK_INDICES, when the call runs)."""
    for name, t, ndim in (("q", q, 3), ("k", k, 3), ("v", v, 3), ("cu_seqlens_q", cu_seqlens_q, 1),
                          ("cu_seqlens_k", cu_seqlens_k, 1)):
        if t.dim() != ndim:
            raise ValueError(f"{name}: {t.dim()} dimensions, must be {ndim}")
    o, lse = K.varlen_outputs(q)
    _checks.validate("kgen_attention_varlen_forward", (q, k, v, o, lse), False, _forward_options(scale, causal),
                     _variant_argument(K._variant(variant, named),
                                       sequences=(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)))
    return o, lse


_register(f"varlen_attention_forward(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
          f"int max_seqlen_q, int max_seqlen_k, float? scale=None, bool causal=False, {_VARIANT}) -> (Tensor, Tensor)",
          K.varlen_attention_forward, _fake_varlen_attention_forward, cast=(0, 1, 2))
def _fake_varlen_attention_backward(q, k, v, o, lse, d_o, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    scale=None, causal=False, deterministic=False, tensor_learnable=None, *variant,
                                    **named):
    return _fake_variant_backward("kgen_attention_varlen_backward", q, k, v, o, lse, d_o,
                                  _gradient_options(scale, causal, deterministic, None), tensor_learnable, variant,
                                  named, sequences=(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


_register("varlen_attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor d_o, "
          "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float? scale=None, "
          f"bool causal=False, bool deterministic=False, bool[]? tensor_learnable=None, {_VARIANT}) "
          "-> (Tensor, Tensor, Tensor, Tensor, Tensor[])", K.varlen_attention_backward, _fake_varlen_attention_backward)
def _fake_varlen_attention_double_backward(q, k, v, o, lse, d_o, gq, gk, gv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                           max_seqlen_k, scale=None, causal=False, deterministic=False, config=None,
                                           *variant, **named):
    """Shapes of a packed double backward, its call validated."""
    for name, t, ndim in (("q", q, 3), ("k", k, 3), ("v", v, 3), ("d_o", d_o, 3), ("gq", gq, 3), ("gk", gk, 3),
                          ("gv", gv, 3), ("cu_seqlens_q", cu_seqlens_q, 1), ("cu_seqlens_k", cu_seqlens_k, 1)):
        if t is not None and t.dim() != ndim:
            raise ValueError(f"{name}: {t.dim()} dimensions, must be {ndim}")
    outputs = K._double_backward_outputs(q, k, v, o)
    _checks.validate("kgen_attention_varlen_double_backward",
                     (q, k, v, o, lse, *map(K._dense, (d_o, gq, gk, gv)), *outputs), False,
                     _gradient_options(scale, causal, deterministic, config),
                     _variant_argument(K._variant(variant, named),
                                       sequences=(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)))
    return outputs


_register("varlen_attention_double_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor d_o, "
          "Tensor? gq, Tensor? gk, Tensor? gv, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
          "int max_seqlen_k, float? scale=None, bool causal=False, bool deterministic=False, str? config=None, "
          f"{_VARIANT}) -> (Tensor, Tensor, Tensor, Tensor)", K.varlen_attention_double_backward,
          _fake_varlen_attention_double_backward)


def _fake_paged_attention_forward(q, k_cache, v_cache, block_table, cache_seqlens=None, scale=None, causal=False,
                                  layout="bnhd", *variant, **named):
    """Shapes of a paged forward, its call validated (the pages a row reads live on the GPU: the
    library reads them, under KGEN_CHECK_INDICES, when the call runs)."""
    for name, t, ndim in (("q", q, 4), ("k_cache", k_cache, 4), ("v_cache", v_cache, 4), ("block_table", block_table, 2)):
        if t.dim() != ndim:
            raise ValueError(f"{name}: {t.dim()} dimensions, must be {ndim}")
    swap = K._swap(layout)
    o, lse = K._forward_outputs(q, swap)
    variant = K._variant(variant, named)

    def extra():  # the paged K/V and the variant, as paged_forward_out passes them
        c, keep = K._variant_struct(variant, describe=_checks.descriptor)
        table = _checks.descriptor(block_table)
        lens = None if cache_seqlens is None else _checks.descriptor(cache_seqlens)
        kv = _lib.PagedKV(ctypes.addressof(table), None if lens is None else ctypes.addressof(lens))
        return (ctypes.addressof(kv), ctypes.addressof(c)), (c, keep, table, lens, kv)
    _checks.validate("kgen_attention_paged_forward", (q, k_cache, v_cache, o, lse), (swap, False, False, swap, False),
                     _forward_options(scale, causal), extra)
    return o, lse


def _fake_paged_append(k, v, k_cache, v_cache, block_table, cache_seqlens, rotary_cos=None, rotary_sin=None,
                       rotary_interleaved=False, q=None, q_out=None, q_sequential=True, layout="bnhd"):
    for name, t, ndim in (("k", k, 4), ("v", v, 4), ("k_cache", k_cache, 4), ("v_cache", v_cache, 4),
                          ("cache_seqlens", cache_seqlens, 1), ("block_table", block_table, 2), ("q", q, 4),
                          ("q_out", q_out, 4), ("rotary_cos", rotary_cos, 2), ("rotary_sin", rotary_sin, 2)):
        if t is not None and t.dim() != ndim:
            raise ValueError(f"{name}: {t.dim()} dimensions, must be {ndim}")
    K._swap(layout)


_register("paged_append(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? block_table, "
          "Tensor cache_seqlens, Tensor? rotary_cos=None, Tensor? rotary_sin=None, bool rotary_interleaved=False, "
          "Tensor(c!)? q=None, Tensor(d!)? q_out=None, bool q_sequential=True, str layout=\"bnhd\") -> ()",
          K.paged_append, _fake_paged_append)
_register("paged_attention_forward(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, "
          f"Tensor? cache_seqlens=None, float? scale=None, bool causal=False, str layout=\"bnhd\", {_VARIANT}) "
          "-> (Tensor, Tensor)", K.paged_attention_forward, _fake_paged_attention_forward, cast=(0, 1, 2))
_register(f"attention_forward_variant_out(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor(b!)? lse, {_ATTENTION}, "
          f"{_VARIANT}) -> ()", K.attention_forward_variant_out, _fake_attention_forward_variant_out)
_register("attention_backward_variant(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor d_o, "
          f"{_GRADIENT}, bool[]? tensor_learnable=None, {_VARIANT}) -> (Tensor, Tensor, Tensor, Tensor, Tensor[])",
          K.attention_backward_variant, _fake_attention_backward_variant)
_register("attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor d_o, "
          f"{_GRADIENT}) -> (Tensor, Tensor, Tensor)", K.attention_backward, _fake_attention_backward)
_register("attention_backward_out(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor d_o, Tensor(a!) dq, "
          f"Tensor(b!) dk, Tensor(c!) dv, {_GRADIENT}) -> ()", K.attention_backward_out, _fake_attention_backward_out)
_register("attention_double_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor d_o, Tensor? gq, "
          f"Tensor? gk, Tensor? gv, {_GRADIENT}) -> (Tensor, Tensor, Tensor, Tensor)",
          K.attention_double_backward, _fake_attention_double_backward)
_register("attention_double_backward_variant(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor d_o, "
          f"Tensor? gq, Tensor? gk, Tensor? gv, {_GRADIENT}, {_VARIANT}) -> (Tensor, Tensor, Tensor, Tensor)",
          K.attention_double_backward_variant, _fake_attention_double_backward)


# --- LRPE-cosine ----------------------------------------------------------------------------------

def _fake_lrpe(x, theta, d_o, out, angles, *, offset=0, grid=(), extra=0, act, layout, md):
    """`out`, the LRPE call validated: its C function by `md` and whether d_o is given (then out is dx)."""
    code, n = K._act(act), _checks.example_int

    def options():
        g = [n(size) for size in grid] + [0, 0, 0]
        return _lib.LrpeOptions(code, n(offset), len(grid), (ctypes.c_int64 * 3)(*g[:3]), n(extra))
    tensors = (x, theta, out) if d_o is None else (x, theta, K._dense(d_o), out)
    function = ("kgen_md_lrpe_cosine_" if md else "kgen_lrpe_cosine_") + ("forward" if d_o is None else "backward")
    _checks.validate(function, (*tensors, angles) if md else tensors, K._swap(layout), options)
    return out


def _fake_lrpe_cosine_forward(x, theta, offset=0, act="none", layout="bhnd", config=None):
    o = K._lrpe_output(x, 2 * x.shape[-1])
    return _fake_lrpe(x, theta, None, o, None, offset=offset, act=act, layout=layout, md=False)


def _fake_lrpe_cosine_backward(x, theta, d_o, offset=0, act="none", layout="bhnd", config=None):
    return _fake_lrpe(x, theta, d_o, torch.empty_like(x), None, offset=offset, act=act, layout=layout, md=False)


def _fake_md_lrpe_cosine_forward_cached(x, theta, grid, extra=0, act="none", layout="bhnd", config=None, cache=True):
    o = K._lrpe_output(x, 2 * x.shape[-1])
    angles = K._angles(x, K._swap(layout)) if cache else None
    _fake_lrpe(x, theta, None, o, angles, grid=grid, extra=extra, act=act, layout=layout, md=True)
    return o, angles


def _fake_md_lrpe_cosine_forward(x, theta, grid, extra=0, act="none", layout="bhnd", config=None):
    return _fake_md_lrpe_cosine_forward_cached(x, theta, grid, extra, act, layout, config, cache=False)[0]


def _fake_md_lrpe_cosine_backward(x, theta, d_o, angles, grid, extra=0, act="none", layout="bhnd", config=None):
    return _fake_lrpe(x, theta, d_o, torch.empty_like(x), angles, grid=grid, extra=extra, act=act, layout=layout,
                      md=True)


_register(f"lrpe_cosine_forward(Tensor x, Tensor theta, int offset=0, {_LRPE}) -> Tensor",
          K.lrpe_cosine_forward, _fake_lrpe_cosine_forward, cast=(0,))
_register(f"lrpe_cosine_backward(Tensor x, Tensor theta, Tensor d_o, int offset=0, {_LRPE}) -> Tensor",
          K.lrpe_cosine_backward, _fake_lrpe_cosine_backward)
_register(f"md_lrpe_cosine_forward(Tensor x, Tensor theta, int[] grid, int extra=0, {_LRPE}) -> Tensor",
          K.md_lrpe_cosine_forward, _fake_md_lrpe_cosine_forward, cast=(0,))
_register(f"md_lrpe_cosine_forward_cached(Tensor x, Tensor theta, int[] grid, int extra=0, {_LRPE}) -> (Tensor, Tensor)",
          K.md_lrpe_cosine_forward_cached, _fake_md_lrpe_cosine_forward_cached, cast=(0,))
_register("md_lrpe_cosine_backward(Tensor x, Tensor theta, Tensor d_o, Tensor? angles, int[] grid, int extra=0, "
          f"{_LRPE}) -> Tensor", K.md_lrpe_cosine_backward, _fake_md_lrpe_cosine_backward)
