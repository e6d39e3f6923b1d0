"""PyTorch front end: kgen's operators on torch tensors, for eager code and torch.compile.

`attention` is the differentiable attention: an autograd Function whose backward runs kgen's
backward kernels and is itself differentiable through kgen's double-backward kernels.
attention_forward/backward/double_backward are the raw operators (autograd does not see them).
attention and attention_forward also take attention variants (sliding windows, softcap, ALiBi,
sinks, prefix-LM, chunks, documents and score/mask expressions); attention's gradients flow
through them (to q, k, v, the sinks and learnable expression tensors) and, for q, k, v and d_o,
through its double backward (the sinks and tensors are constants there).
lrpe_cosine and md_lrpe_cosine are autograd Functions whose backward runs kgen's backward kernels
(theta gets no gradient, as in the reference library).

Every function here is a thin layer over the operators torch.ops.kgen.* (kgen/_ops.py; the
library's tensors zero-copy through DLPack descriptors, on the current CUDA stream). In eager
mode it calls their CUDA kernels directly, without the dispatcher; under torch.compile, in
FakeTensorMode, on meta tensors or under a dispatch mode it calls the operators, so that
torch.compile(fullgraph=True) traces forward and backward with no graph break. The double
backward runs eagerly only: aot_autograd refuses double backward through any compiled graph.

Under torch.autocast("cuda"), floating inputs (not theta) are cast to the autocast dtype, as SDPA
does, and the output has that dtype. Shapes, dtypes, devices and strides are checked by the
library (its message names the argument, KgenError), and at trace time by the operators' fake
kernels with the same messages; Python checks argument types, layout and act names and the scale.
"""
from __future__ import annotations

import inspect
import math

try:
    import torch
except ImportError as error:  # the package and the CLI need no PyTorch; this module does
    raise ImportError("kgen.torch needs PyTorch 2.4 or later: pip install 'kgen[torch]' (or install torch "
                      "for your CUDA from pytorch.org)") from error

from . import _calls, _checks, _kernels, _ops
from ._lib import KgenError

__all__ = ["attention", "attention_forward", "attention_backward", "attention_double_backward",
           "lrpe_cosine", "md_lrpe_cosine", "lrpe_cosine_backward", "md_lrpe_cosine_backward", "KgenError",
           "LAYOUTS", "LRPE_ACTS", "flex_attention", "FlexTraceError", "varlen_attention",
           "paged_attention", "paged_append", "PagedAttention"]
LAYOUTS = _kernels.LAYOUTS
_autocast = _ops.autocast
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack


def _eager(t) -> bool:
    """Whether a call on `t` may run its CUDA kernel directly: not traced, a plain CUDA tensor and
    no dispatch mode active (else the operator goes through PyTorch's dispatcher)."""
    return not _is_compiling() and type(t) is torch.Tensor and t.is_cuda and not _dispatch_modes()


_Tensor, _strided = torch.Tensor, torch.strided
_autocast_enabled, _autocast_dtype = torch.is_autocast_enabled, torch.get_autocast_dtype


def _direct(q, k, v) -> bool:
    """The fast path's test (callers test _is_compiling() first, which torch.compile folds): q, k
    and v plain strided tensors, q on a CUDA device, no dispatch mode, and no autocast cast to
    apply (autocast off, or q, k and v in its dtype already, where it casts nothing). What it lets
    through runs its kernel through a call form (_calls.py); anything else takes the checked path
    below it, whose errors name the argument."""
    return (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor and q.is_cuda and
            q.layout is _strided and k.layout is _strided and v.layout is _strided and not _dispatch_modes() and
            (not _autocast_enabled("cuda") or q.dtype is k.dtype is v.dtype is _autocast_dtype("cuda")))


# The C apply of autograd Functions: torch.autograd.Function.apply less its Python preamble (binding
# default arguments of setup_context-style Functions, routing functorch transforms, unwrapping dead
# functorch wrappers), for the fast path outside functorch transforms (the caller unwraps).
_c_apply = torch._C._FunctionBase.__dict__.get("apply")
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_unwrap_if_dead = getattr(torch._C._functorch, "unwrap_if_dead", None)


def _applier(function):
    """function.apply, or its C apply where this PyTorch has the pieces (see _c_apply)."""
    if _c_apply is None or _functorch_active is None or _unwrap_if_dead is None:
        return function.apply
    c_apply = _c_apply.__get__(None, function)

    def apply(*args):
        if _functorch_active():
            return function.apply(*args)
        return c_apply(*[_unwrap_if_dead(a) if isinstance(a, _Tensor) else a for a in args])
    return apply


def _op(name: str):
    """(CUDA kernel, operator) of torch.ops.kgen.`name`."""
    return getattr(_kernels, name), getattr(torch.ops.kgen, name).default


_FORWARD, _FORWARD_OUT = _op("attention_forward"), _op("attention_forward_out")
_BACKWARD, _BACKWARD_OUT = _op("attention_backward"), _op("attention_backward_out")
_DOUBLE_BACKWARD = _op("attention_double_backward")
_DOUBLE_BACKWARD_VARIANT = _op("attention_double_backward_variant")
_FORWARD_VARIANT, _FORWARD_VARIANT_OUT = _op("attention_forward_variant"), _op("attention_forward_variant_out")
_BACKWARD_VARIANT = _op("attention_backward_variant")
_VARLEN_FORWARD, _VARLEN_BACKWARD = _op("varlen_attention_forward"), _op("varlen_attention_backward")
_VARLEN_DOUBLE_BACKWARD = _op("varlen_attention_double_backward")
_PAGED_FORWARD = _op("paged_attention_forward")
_PAGED_APPEND = _op("paged_append")
_LRPE_FORWARD, _LRPE_BACKWARD = _op("lrpe_cosine_forward"), _op("lrpe_cosine_backward")
_MD_LRPE_FORWARD, _MD_LRPE_FORWARD_CACHED = _op("md_lrpe_cosine_forward"), _op("md_lrpe_cosine_forward_cached")
_MD_LRPE_BACKWARD = _op("md_lrpe_cosine_backward")


def _run(op, *args):
    """torch.ops.kgen operator `op` ((kernel, operator) of _op) on `args`, the first a tensor."""
    return op[0](*args) if _eager(args[0]) else op[1](*args)


def _forward(q, k, v, scale, causal, layout, with_lse: bool):
    """(o, lse) of the forward operator; in eager mode, lse is None unless with_lse."""
    if _eager(q):
        return _kernels.attention_forward(q, k, v, scale, causal, layout, with_lse)
    return _FORWARD[1](q, k, v, scale, causal, layout)


def _check_types(names: str, *tensors) -> None:
    """TypeError unless each of `tensors` (named by the words of `names`) is None or a strided tensor."""
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or t.layout is not torch.strided):
            for name, t in zip(names.split(), tensors):
                if t is None:
                    continue
                if not isinstance(t, torch.Tensor):
                    raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
                if t.layout != torch.strided:
                    raise TypeError(f"{name} must be a strided (dense) tensor, got {t.layout}")
            return


# --- attention variants (docs/attention.md, "Variants from C and Python") ---------------------------

def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _variant(*, window: tuple[int, int] | None = None, softcap: float = 0, alibi_slopes: torch.Tensor | None = None,
             sinks: torch.Tensor | None = None, causal_top_left: bool = False, prefix: int | None = None,
             chunk: int | None = None, document_ids: torch.Tensor | None = None, score_mod: str | None = None,
             mask_mod: str | None = None, scalars: dict[str, int | float] | None = None,
             tensors: dict[str, torch.Tensor] | None = None) -> _checks.Variant:
    """The operators' variant of kgen.torch's variant keywords, their forms checked (the library
    checks the values: dtypes, shapes, devices, expressions)."""
    if window is None:
        window = (-1, -1)
    if not (isinstance(window, (tuple, list)) and len(window) == 2 and all(_is_int(w) and w >= -1 for w in window)):
        raise ValueError(f"window must be None or (left, right), two ints >= -1 (-1 = an open side), got {window!r}")
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not (0 <= softcap < math.inf):
        raise ValueError(f"softcap must be a finite number >= 0 (0 = none), got {softcap!r}")
    if prefix is not None and not (_is_int(prefix) and prefix >= 0):
        raise ValueError(f"prefix must be None or an int >= 0 (the keys every query sees), got {prefix!r}")
    if chunk is not None and not (_is_int(chunk) and chunk >= 1):
        raise ValueError(f"chunk must be None or an int >= 1 (the chunk length), got {chunk!r}")
    for name, text in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if text is not None and not isinstance(text, str):
            raise TypeError(f"{name} must be a str (an expression), got {type(text).__name__}")
    _check_types("alibi_slopes sinks document_ids", alibi_slopes, sinks, document_ids)
    scalars = {} if scalars is None else scalars
    tensors = {} if tensors is None else tensors
    if not isinstance(scalars, dict) or not isinstance(tensors, dict):
        raise TypeError("scalars and tensors must be dicts keyed by the names the expressions use")
    for name, value in scalars.items():
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"scalars: {name!r} must map a str to an int (integer scalar) or a float (real), "
                            f"got {type(value).__name__}")
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensors: the name {name!r} must be a str")
        _check_types(f"tensors[{name}]", t)
    return _checks.Variant(
        causal_top_left=bool(causal_top_left), window_left=window[0], window_right=window[1], softcap=float(softcap),
        alibi_slopes=alibi_slopes, prefix=-1 if prefix is None else prefix, chunk=0 if chunk is None else chunk,
        document_ids=document_ids, sinks=sinks, score_mod=score_mod, mask_mod=mask_mod,
        scalar_names=list(scalars), scalar_values=[float(x) for x in scalars.values()],
        scalar_integer=[_is_int(x) for x in scalars.values()], tensor_names=list(tensors),
        tensors=list(tensors.values()))


def _variant_forward(q, k, v, causal, scale, layout, variant: _checks.Variant, out, lse, return_lse: bool):
    """attention_forward's variant path (q, k, v already autocast)."""
    if out is None and lse is None:
        if _eager(q):
            o, lse = _kernels.variant_forward(q, k, v, scale, causal, layout, variant, return_lse)
        else:
            o, lse = _FORWARD_VARIANT[1](q, k, v, scale, causal, layout, *variant)
        return (o, lse) if return_lse else o
    if out is None:
        out = _kernels._forward_outputs(q, _kernels._swap(layout), False, v)[0]
    if lse is None and return_lse:
        lse = _kernels._forward_outputs(q, _kernels._swap(layout))[1]
    if _eager(q):
        _kernels.variant_forward_out(q, k, v, out, lse, scale, causal, layout, variant)
    else:
        _FORWARD_VARIANT_OUT[1](q, k, v, out, lse, scale, causal, layout, *variant)
    return (out, lse) if return_lse else out


_VARIANT_KEYWORDS = frozenset(inspect.signature(_variant).parameters)


def _variant_of(function: str, keywords: dict) -> _checks.Variant:
    """The variant of a call's variant keywords (**variant of `function`)."""
    unknown = sorted(key for key in keywords if key not in _VARIANT_KEYWORDS)  # traceable by torch.compile
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    return _variant(**keywords)


def _with_variant_keywords(function):
    """`function` whose signature (help, inspect) lists the variant keywords its **variant takes."""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    function.__signature__ = signature.replace(
        parameters=parameters + list(inspect.signature(_variant).parameters.values()))
    return function


@_with_variant_keywords
def attention_forward(q, k, v, *, causal: bool = False, scale: float | None = None,
                      layout: str = "bhnd", out=None, lse=None, return_lse: bool = False, descale_q=None,
                      descale_k=None, descale_v=None, out_dtype=None, config: str | None = None, **variant):
    """o = softmax(scale·q·kᵀ + mask)·v, computed asynchronously on the current CUDA stream.

    q is (b, h_q, n_q, d) for layout "bhnd" or (b, n_q, h_q, d) for "bnhd"; k and v likewise
    with h_kv heads (h_q % h_kv == 0) and n_k keys; any strides with a contiguous last dim. v may
    have a head dim d_v < d of its own (MLA's 192/128, plain and causal attention): out then has
    d_v columns, and the backward gives v's gradient d_v columns. dtypes float16/bfloat16 (tensor
    cores, fp32 accumulation) or float32 (fp32 math, no tf32);
    under torch.autocast("cuda"), floating q, k, v are cast to the autocast dtype.
    scale defaults to 1/sqrt(d). causal masks key j for j > i + (n_k - n_q) (bottom-right
    aligned, like FlashAttention-2; SDPA's is_causal=True is top-left aligned, so the two agree
    only when n_q == n_k: causal_top_left=True gives SDPA's mask); rows with every key masked
    give o = 0, lse = -inf.

    out (same layout and shape as q) is written in place if given, else allocated contiguous in
    q's layout. lse is the fp32 natural-log logsumexp of the scaled scores, shape (b, h_q, n_q)
    in either layout, unit stride along n_q; it is computed only if `lse` is given or
    return_lse is True (the operator torch.ops.kgen.attention_forward, which torch.compile
    traces, always computes it). Returns out, or (out, lse) if return_lse.

    Variants (the remaining keywords, any combination; see `attention`) run the operator
    torch.ops.kgen.attention_forward_variant; lse is then the logsumexp of the modified scores
    (and of the sink's logit, with sinks).

    FP8: q, k and v of dtype torch.float8_e4m3fn run the FP8 forward (docs/attention.md §11; sm_90a,
    head dims 128 and 256, plain or causal, GQA; no autograd). descale_q, descale_k and descale_v
    (float32, one element or (b, h_kv); None: 1) turn the stored values into the real ones;
    out_dtype (torch.bfloat16 by default, or torch.float16) is o's dtype when out is not given;
    config may name its kernel's config (a ws config of bm128 and bn128, or bn192 at head dim 128, such as
    ws:bm128:bn192:s3:pp1).
    """
    if q.dtype == _FP8:
        return _forward_fp8(q, k, v, causal, scale, layout, out, lse, return_lse, (descale_q, descale_k, descale_v),
                            out_dtype, config, variant)
    if config is not None:
        _checks.invalid("config: attention_forward takes a config for float8_e4m3fn inputs only (16-bit calls: "
                        "kgen tune, or the C++ API's AttentionOptions.config)")
    if descale_q is not None or descale_k is not None or descale_v is not None or out_dtype is not None:
        _checks.invalid(f"descale_q: descale factors and out_dtype apply to float8_e4m3fn q, k and v only, not {q.dtype}")
    if not variant and not _is_compiling() and _direct(q, k, v):
        if out is None and lse is None:
            o, lse, _ = _calls.forward(q, k, v, scale, causal, layout, return_lse)
            return (o, lse) if return_lse else o
        if (type(out) is _Tensor and out.layout is _strided and not (return_lse and lse is None) and
                (lse is None or (type(lse) is _Tensor and lse.layout is _strided))):
            _calls.forward_out(q, k, v, out, lse, scale, causal, layout)
            return (out, lse) if return_lse else out
    _check_types("q k v out lse", q, k, v, out, lse)
    q, k, v = _autocast(q, k, v)
    if variant:  # the plain path's one extra step
        return _variant_forward(q, k, v, causal, scale, layout, _variant_of("attention_forward", variant), out, lse,
                                return_lse)
    if out is None and lse is None:
        o, lse = _forward(q, k, v, scale, causal, layout, return_lse)
        return (o, lse) if return_lse else o
    if out is None:
        out = _kernels._forward_outputs(q, _kernels._swap(layout), False, v)[0]
    if lse is None and return_lse:
        lse = _kernels._forward_outputs(q, _kernels._swap(layout))[1]
    _run(_FORWARD_OUT, q, k, v, out, lse, scale, causal, layout)
    return (out, lse) if return_lse else out


_FP8 = getattr(torch, "float8_e4m3fn", None)


def _forward_fp8(q, k, v, causal, scale, layout, out, lse, return_lse, descales, out_dtype, config, variant):
    """attention_forward on E4M3 inputs (kgen_attention_forward_fp8)."""
    if variant:
        _checks.invalid(f"{next(iter(variant))}: FP8 inputs run plain or causal attention, not a variant")
    if any(t.requires_grad for t in (q, k, v) if isinstance(t, torch.Tensor)):
        _checks.invalid("q: the FP8 forward has no backward; detach q, k and v (or run them in 16 bits)")
    if out_dtype is None:
        out_dtype = torch.bfloat16 if out is None else out.dtype
    if out_dtype not in (torch.float16, torch.bfloat16):
        _checks.invalid(f"out_dtype: {out_dtype} must be torch.float16 or torch.bfloat16")
    if out is None:
        out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    if lse is None and return_lse:
        lse = _kernels._forward_outputs(out, _kernels._swap(layout))[1]
    _calls.forward_fp8(q, k, v, descales, scale, causal, layout, out, lse, config)
    return (out, lse) if return_lse else out


def attention_backward(q, k, v, o, lse, d_o, *, causal: bool = False, scale: float | None = None,
                       layout: str = "bhnd", deterministic: bool = False, dq=None, dk=None, dv=None,
                       config: str | None = None):
    """(dq, dk, dv): gradients of attention_forward given d_o = ∂L/∂o, o and lse (the forward's
    outputs, lse fp32 (b, h_q, n_q)). Same shapes, layouts and dtypes as attention_forward; dk and
    dv sum over the query heads of each kv group. deterministic=True gives the same bits on every
    run (no atomics). Outputs are allocated like q and k unless given. config forces a kernel
    config ("fa2:bm64:bn128:w8"); None = kgen's choice."""
    _check_types("q k v o lse d_o dq dk dv", q, k, v, o, lse, d_o, dq, dk, dv)
    if dq is None and dk is None and dv is None:
        return _run(_BACKWARD, q, k, v, o, lse, d_o, scale, causal, layout, deterministic, config)
    dq = torch.empty_like(q) if dq is None else dq
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    _run(_BACKWARD_OUT, q, k, v, o, lse, d_o, dq, dk, dv, scale, causal, layout, deterministic, config)
    return dq, dk, dv


def attention_double_backward(q, k, v, o, lse, d_o, gq=None, gk=None, gv=None, *, causal: bool = False,
                              scale: float | None = None, layout: str = "bhnd", deterministic: bool = False,
                              config: str | None = None):
    """(q_bar, k_bar, v_bar, do_bar): gradients of an outer loss with respect to q, k, v and d_o,
    given its cotangents gq, gk, gv of the backward's dq, dk, dv (None = zero, work skipped).
    O(n·d) memory (docs/attention.md §4). deterministic=True gives the same bits on every run."""
    _check_types("q k v o lse d_o gq gk gv", q, k, v, o, lse, d_o, gq, gk, gv)
    return _run(_DOUBLE_BACKWARD, q, k, v, o, lse, d_o, gq, gk, gv, scale, causal, layout, deterministic, config)


class _AttentionBackward(torch.autograd.Function):
    """(q, k, v, o, lse, d_o) -> (dq, dk, dv); its backward is kgen's double backward, which
    accounts for every dependence of dq, dk, dv on (q, k, v, d_o) (o and lse only cache
    intermediates of q, k, v, so they get no gradient here)."""

    @staticmethod
    def forward(ctx, q, k, v, o, lse, d_o, causal, scale, layout, deterministic, form):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, o, lse, d_o)
        ctx.options = (causal, scale, layout, deterministic, form)
        if form is not None:  # eager, from _Attention's fast path
            return _calls.backward(q, k, v, o, lse, d_o, scale, causal, layout, deterministic, None, form)
        return _run(_BACKWARD, q, k, v, o, lse, d_o, scale, causal, layout, deterministic, None)

    @staticmethod
    def backward(ctx, gq, gk, gv):
        if gq is None and gk is None and gv is None:
            return (None,) * 11
        q, k, v, o, lse, d_o = ctx.saved_tensors
        causal, scale, layout, deterministic, form = ctx.options
        if form is not None and not _is_compiling() and not _dispatch_modes():
            q_bar, k_bar, v_bar, do_bar = _calls.double_backward(q, k, v, o, lse, d_o, gq, gk, gv, scale, causal,
                                                                 layout, deterministic, None, form)
        else:
            q_bar, k_bar, v_bar, do_bar = _run(_DOUBLE_BACKWARD, q, k, v, o, lse, d_o, gq, gk, gv, scale, causal,
                                               layout, deterministic, None)
        return q_bar, k_bar, v_bar, None, None, do_bar, None, None, None, None, None


class _Attention(torch.autograd.Function):
    """(q, k, v) -> o. In eager mode its forward keeps the forward's call form (_calls.py), whose
    id keys the backward's and double backward's forms: their descriptors of q, k, v, o and lse
    are the forward's, so a backward reads only d_o's."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, deterministic):
        # Without this, autograd would hand backward a zero d_o whenever o gets no gradient (the
        # second grad reaches this node through o, whose gradient the double backward leaves
        # None) and run a whole first-order backward on zeros.
        ctx.set_materialize_grads(False)
        if _eager(q):
            o, lse, form = _calls.forward(q, k, v, scale, causal, layout, True, build=True)
        else:
            (o, lse), form = _FORWARD[1](q, k, v, scale, causal, layout), None
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = (causal, scale, layout, deterministic, form)
        return o

    @staticmethod
    def backward(ctx, d_o):
        if d_o is None:
            return (None,) * 7
        q, k, v, o, lse = ctx.saved_tensors
        causal, scale, layout, deterministic, form = ctx.options
        if form is not None and (_is_compiling() or _dispatch_modes()):
            form = None  # traced (compiled autograd) or under a mode: the operators
        if torch.is_grad_enabled():  # create_graph: the gradients are differentiable again
            # o detached: _AttentionBackward gives it no gradient, so the second grad has no edge
            # back to this node to walk (one Python node fewer per double backward).
            apply = _attention_backward_apply if form is not None else _AttentionBackward.apply
            dq, dk, dv = apply(q, k, v, o.detach(), lse, d_o, causal, scale, layout, deterministic, form)
        elif form is not None:  # a plain backward: no node to record, one C call
            dq, dk, dv = _calls.backward(q, k, v, o, lse, d_o, scale, causal, layout, deterministic, None, form)
        else:
            dq, dk, dv = _run(_BACKWARD, q, k, v, o, lse, d_o, scale, causal, layout, deterministic, None)
        return dq, dk, dv, None, None, None, None


_attention_apply, _attention_backward_apply = _applier(_Attention), _applier(_AttentionBackward)


# --- the autograd of attention variants -------------------------------------------------------------

_CONSTANTS_ONLY = ("kgen.torch.attention: the double backward of a variant gives no gradient to {what}; differentiate "
                   "the gradients again with {what} not requiring grad (or detached)")


def _variant_constants(variant: _checks.Variant) -> tuple:
    """The variant's fields other than its tensors, in _checks.Variant's order: what an autograd
    Function keeps on its ctx (its tensors are the Function's inputs and saved tensors)."""
    return (variant.causal_top_left, variant.window_left, variant.window_right, variant.softcap, variant.prefix,
            variant.chunk, variant.score_mod, variant.mask_mod, tuple(variant.scalar_names),
            tuple(variant.scalar_values), tuple(variant.scalar_integer), tuple(variant.tensor_names))


def _variant_from(constants: tuple, alibi_slopes, document_ids, sinks, tensors) -> _checks.Variant:
    """The variant of _variant_constants' fields and its tensors."""
    (causal_top_left, window_left, window_right, softcap, prefix, chunk, score_mod, mask_mod, scalar_names,
     scalar_values, scalar_integer, tensor_names) = constants
    return _checks.Variant(causal_top_left, window_left, window_right, softcap, alibi_slopes, prefix, chunk,
                           document_ids, sinks, score_mod, mask_mod, list(scalar_names), list(scalar_values),
                           list(scalar_integer), list(tensor_names), list(tensors))


# Where attention_backward_variant's arguments (q, k, v, o, lse, d_o, scale, causal, layout,
# deterministic, config, tensor_learnable, <variant>) and varlen_attention_backward's (q, k, v, o,
# lse, d_o, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, deterministic,
# tensor_learnable, <variant>) hold the variant, and its sinks within it.
_VARIANT_ARGS = 12
_VARLEN_VARIANT_ARGS = 14
_SINKS_FIELD = _checks.Variant._fields.index("sinks")


class _AttentionVariantBackward(torch.autograd.Function):
    """A variant backward operator (attention_backward_variant or varlen_attention_backward) and
    its arguments -> (dq, dk, dv, sinks_grad, *tensor grads) where autograd records it
    (create_graph=True). Differentiating dq, dk, dv again runs kgen's double backward of the
    variant (attention_double_backward_variant, or varlen_attention_double_backward for packed
    batches), which gives q, k, v and d_o their gradients and treats the variant's sinks and
    tensors as constants: where a second grad needs theirs (sinks that require grad, a learnable
    tensor, a cotangent of sinks_grad or a tensor's gradient), it raises NotImplementedError."""

    @staticmethod
    def forward(ctx, op, *args):
        ctx.set_materialize_grads(False)
        ctx.inputs = len(args) + 1
        ctx.op = op
        ctx.save_for_backward(*args[:6])
        ctx.rest = args[6:]
        dq, dk, dv, sinks_grad, grads = _run(op, *args)
        return (dq, dk, dv, sinks_grad, *grads)

    @staticmethod
    def backward(ctx, gq, gk, gv, *cotangents):
        if gq is None and gk is None and gv is None and all(g is None for g in cotangents):
            return (None,) * ctx.inputs
        if any(g is not None for g in cotangents):
            raise NotImplementedError(_CONSTANTS_ONLY.format(what="the sinks' or tensors' gradients"))
        packed = ctx.op is _VARLEN_BACKWARD
        if packed:
            cu_q, cu_k, max_q, max_k, scale, causal, deterministic, learnable, *variant = ctx.rest
        else:
            scale, causal, layout, deterministic, _config, learnable, *variant = ctx.rest
        if any(learnable):
            raise NotImplementedError(_CONSTANTS_ONLY.format(what="the tensors"))
        if ctx.needs_input_grad[1 + (_VARLEN_VARIANT_ARGS if packed else _VARIANT_ARGS) + _SINKS_FIELD]:
            raise NotImplementedError(_CONSTANTS_ONLY.format(what="the sinks"))
        q, k, v, o, lse, d_o = ctx.saved_tensors
        if packed:
            q_bar, k_bar, v_bar, do_bar = _run(_VARLEN_DOUBLE_BACKWARD, q, k, v, o, lse, d_o, gq, gk, gv, cu_q, cu_k,
                                               max_q, max_k, scale, causal, deterministic, None, *variant)
        else:
            q_bar, k_bar, v_bar, do_bar = _run(_DOUBLE_BACKWARD_VARIANT, q, k, v, o, lse, d_o, gq, gk, gv, scale,
                                               causal, layout, deterministic, None, *variant)
        return (None, q_bar, k_bar, v_bar, None, None, do_bar) + (None,) * (ctx.inputs - 7)


def _variant_gradients(op, args, learnable, sinks) -> tuple:
    """(dq, dk, dv, sinks_grad or None, tensor grads or None each) of a variant backward operator."""
    if torch.is_grad_enabled():  # create_graph: a node that refuses the double backward
        dq, dk, dv, sinks_grad, *grads = _AttentionVariantBackward.apply(op, *args)
    else:
        dq, dk, dv, sinks_grad, grads = _run(op, *args)
    grads = iter(grads)
    return dq, dk, dv, None if sinks is None else sinks_grad, [next(grads) if learns else None for learns in learnable]


class _AttentionVariant(torch.autograd.Function):
    """(q, k, v, alibi_slopes, document_ids, sinks, *tensors) -> o of a variant. Its backward runs
    kgen's variant backward: dq, dk, dv, the sinks' gradient and the gradients of the tensors
    flagged in `learnable`; alibi_slopes, document_ids and the other tensors get none."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, deterministic, constants, learnable, alibi_slopes, document_ids,
                sinks, *tensors):
        ctx.set_materialize_grads(False)
        variant = _variant_from(constants, alibi_slopes, document_ids, sinks, tensors)
        o, lse = _variant_forward(q, k, v, causal, scale, layout, variant, None, None, True)
        ctx.save_for_backward(q, k, v, o, lse, alibi_slopes, document_ids, sinks, *tensors)
        ctx.options = (causal, scale, layout, deterministic, constants, learnable)
        return o

    @staticmethod
    def backward(ctx, d_o):
        causal, scale, layout, deterministic, constants, learnable = ctx.options
        if d_o is None:
            return (None,) * (12 + len(learnable))
        q, k, v, o, lse, alibi_slopes, document_ids, sinks, *tensors = ctx.saved_tensors
        args = (q, k, v, o, lse, d_o, scale, causal, layout, deterministic, None, learnable,
                *_variant_from(constants, alibi_slopes, document_ids, sinks, tensors))
        dq, dk, dv, sinks_grad, tensor_grads = _variant_gradients(_BACKWARD_VARIANT, args, learnable, sinks)
        return (dq, dk, dv, None, None, None, None, None, None, None, None, sinks_grad, *tensor_grads)


class _VarlenAttention(torch.autograd.Function):
    """(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks, *tensors) -> o of a packed batch; its backward
    runs kgen's packed backward (dq, dk, dv, the sinks' gradient and the learnable tensors')."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, deterministic,
                constants, learnable, alibi_slopes, sinks, *tensors):
        ctx.set_materialize_grads(False)
        variant = _variant_from(constants, alibi_slopes, None, sinks, tensors)
        o, lse = _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                 variant, True)
        ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks, *tensors)
        ctx.options = (max_seqlen_q, max_seqlen_k, causal, scale, deterministic, constants, learnable)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, _d_lse):
        max_q, max_k, causal, scale, deterministic, constants, learnable = ctx.options
        if d_o is None:
            return (None,) * (14 + len(learnable))
        q, k, v, o, lse, cu_q, cu_k, alibi_slopes, sinks, *tensors = ctx.saved_tensors
        args = (q, k, v, o, lse, d_o, cu_q, cu_k, max_q, max_k, scale, causal, deterministic, learnable,
                *_variant_from(constants, alibi_slopes, None, sinks, tensors))
        dq, dk, dv, sinks_grad, tensor_grads = _variant_gradients(_VARLEN_BACKWARD, args, learnable, sinks)
        return (dq, dk, dv, None, None, None, None, None, None, None, None, None, None, sinks_grad, *tensor_grads)


class _Varlen(torch.autograd.Function):
    """(q, k, v) -> (o, lse) of a packed batch of plain attention, the fast path of _VarlenAttention.
    In eager mode its forward keeps the forward's call form (_calls.varlen_forward), whose id keys
    the backward's: a backward then writes d_o's, the gradients' and the sequences' pointers and
    calls the library. A backward that autograd records (create_graph=True), or one traced or
    under a dispatch mode, runs the operators' path instead (whose double backward is kgen's)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, deterministic):
        ctx.set_materialize_grads(False)
        o, lse, form = _calls.varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                                             causal, True, build=True)
        ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.options = (max_seqlen_q, max_seqlen_k, causal, scale, deterministic, form)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, _d_lse):
        if d_o is None:
            return (None,) * 10
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        max_q, max_k, causal, scale, deterministic, form = ctx.options
        if torch.is_grad_enabled() or _is_compiling() or _dispatch_modes():
            args = (q, k, v, o, lse, d_o, cu_q, cu_k, max_q, max_k, scale, causal, deterministic, (), *_NO_VARIANT)
            dq, dk, dv, _, _ = _variant_gradients(_VARLEN_BACKWARD, args, (), None)
        else:
            dq, dk, dv = _calls.varlen_backward(q, k, v, o, lse, d_o, cu_q, cu_k, max_q, max_k, scale, causal,
                                                deterministic, form)
        return dq, dk, dv, None, None, None, None, None, None, None


_varlen_apply = _applier(_Varlen)
_NO_VARIANT = _checks.Variant()
_INT_MAX = (1 << 31) - 1


def _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, variant,
                    with_lse: bool):
    """(o, lse) of a packed batch (lse None unless with_lse on the eager path)."""
    if _eager(q):
        o, lse = _kernels.varlen_outputs(q, with_lse)
        _kernels.varlen_forward_out(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                                    causal, variant)
        return o, lse
    return _VARLEN_FORWARD[1](q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, *variant)


def _variant_attention(q, k, v, causal, scale, layout, deterministic, variant: _checks.Variant):
    """kgen.torch.attention's variant path (q, k, v already autocast): the autograd Function when
    autograd records the call (an input that gets a gradient requires one), else the forward alone."""
    learnable = tuple(t.requires_grad and t.dtype == torch.float32 for t in variant.tensors)
    sinks = variant.sinks
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or any(learnable) or
                                    (sinks is not None and sinks.requires_grad)):
        return _AttentionVariant.apply(q, k, v, causal, scale, layout, deterministic, _variant_constants(variant),
                                       learnable, variant.alibi_slopes, variant.document_ids, sinks, *variant.tensors)
    return _variant_forward(q, k, v, causal, scale, layout, variant, None, None, False)


@_with_variant_keywords
def attention(q, k, v, *, causal: bool = False, scale: float | None = None, layout: str = "bhnd",
              deterministic: bool = False, **variant):
    """Differentiable attention: o = softmax(scale·q·kᵀ + mask)·v on kgen's kernels.

    Arguments as attention_forward (BHND or BNHD, GQA, fp16/bf16/fp32, autocast, current stream).
    Its backward runs kgen's backward kernels and is differentiable again through kgen's double
    backward, so torch.autograd.grad(..., create_graph=True) followed by a second grad runs on
    kgen kernels with O(n·d) memory. torch.compile(fullgraph=True) traces the forward and the
    backward; the double backward runs in eager mode only (aot_autograd refuses double backward).

    Variants (docs/attention.md §8), composable with each other and with `causal`. Each one keys
    off kgen's bottom-right alignment, query i sitting at key position i' = i + n_k - n_q:
    - window=(left, right): keys i' - left <= j <= i' + right (FlashAttention's window_size;
      -1 leaves a side open, None = no window);
    - softcap=c > 0: score' = c·tanh(score / c), applied last;
    - alibi_slopes: fp32 (h_q,), score' -= slope[h]·|i' - j|;
    - sinks: fp32 (h_q,), exp(sinks[h]) joins every row's softmax denominator (lse includes it;
      a row that sees no key gets o = 0 and lse = sinks[h]);
    - causal_top_left=True: j <= i (SDPA's is_causal=True, also when n_q != n_k);
    - prefix=p: j < p or j <= i' (prefix-LM); chunk=c: i' // c == j // c (chunked attention);
    - document_ids: int32 (b, n_k), doc[b][i'] == doc[b][j] (packed documents);
    - score_mod / mask_mod: expressions of score (the scaled logit; score_mod only), b, h, q, k,
      n_q, n_k, the `scalars` (a dict of names to ints, integer scalars, or floats, reals) and
      the `tensors` (a dict of names to fp32 or int32 tensors on q's device, indexed t[i][j]),
      e.g. score_mod="score + bias[h][q - k + 4095]", mask_mod="doc[b][q] == doc[b][k]".
    A kernel is compiled once per distinct variant, then cached; scalar values and tensor
    contents do not recompile.

    Gradients flow through a variant (the operator torch.ops.kgen.attention_backward_variant, which
    torch.compile traces like the forward): loss.backward() gives q, k and v their gradients, and,
    where they require grad, `sinks` (fp32 (h_q,)) and each fp32 tensor of `tensors` (a learnable
    table such as the bias above; a bias constant along each query row has gradient 0). alibi_slopes
    are constants of the preset and document_ids integers: neither gets a gradient (a learnable
    slope is a score_mod such as "score - s[h] * abs(q + n_k - n_q - k)" with tensors={"s": s}).
    The gradients of q, k and v are differentiable again (create_graph=True, then a second grad)
    through kgen's double backward of the variant: the modification's first and second derivatives
    and the mask enter every term, with O(n·d) memory. The sinks and tensors are constants there:
    a second grad that needs their gradient (sinks or a learnable tensor requiring grad) raises
    NotImplementedError."""
    if not variant and not _is_compiling() and _direct(q, k, v):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return _attention_apply(q, k, v, causal, scale, layout, deterministic)
        return _calls.forward(q, k, v, scale, causal, layout, False)[0]  # no autograd bookkeeping
    _check_types("q k v", q, k, v)
    q, k, v = _autocast(q, k, v)
    if variant:  # the plain path's one extra step
        return _variant_attention(q, k, v, causal, scale, layout, deterministic, _variant_of("attention", variant))
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _Attention.apply(q, k, v, causal, scale, layout, deterministic)
    return _forward(q, k, v, scale, causal, layout, False)[0]  # no autograd bookkeeping when none is recorded


@_with_variant_keywords
def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, *,
                     causal: bool = False, scale: float | None = None, return_lse: bool = False,
                     deterministic: bool = False, **variant):
    """Attention over a packed batch (FlashAttention's varlen layout, docs/attention.md §9).

    q is (total_q, h_q, d), k and v (total_k, h_kv, d) (h_q % h_kv == 0), any strides with a
    contiguous last dim; sequence i owns query rows cu_seqlens_q[i] : cu_seqlens_q[i + 1] and key
    rows cu_seqlens_k[i] : cu_seqlens_k[i + 1]. cu_seqlens_* are int32 (b + 1) on q's device,
    non-decreasing from 0 (a sequence may be empty); max_seqlen_* bound the lengths. Indices,
    lengths and masks are each sequence's own: causal is bottom-right per sequence, and the
    variant keywords of `attention` apply per sequence, b being the sequence's index
    (document_ids does not apply: the sequences are the documents). The kernels trust
    cu_seqlens; KGEN_CHECK_INDICES=1 checks them on the host first (synchronous).

    Returns o (like q; rows no sequence owns hold unspecified values), or (o, lse) with
    return_lse, lse fp32 (h_q, total_q). Differentiable: q, k, v, sinks and fp32 tensors that
    require grad get their gradients from kgen's packed backward (dq rows no sequence owns get 0);
    differentiating those gradients again (create_graph=True) runs kgen's packed double backward,
    which gives q, k, v their second-order gradients and treats sinks and tensors as constants."""
    if (not variant and not _is_compiling() and _direct(q, k, v) and type(cu_seqlens_q) is _Tensor and
            type(cu_seqlens_k) is _Tensor and cu_seqlens_q.layout is _strided and cu_seqlens_k.layout is _strided and
            cu_seqlens_q.dim() == 1 and cu_seqlens_k.dim() == 1 and type(max_seqlen_q) is int and
            type(max_seqlen_k) is int and 0 <= max_seqlen_q <= _INT_MAX and 0 <= max_seqlen_k <= _INT_MAX):
        # Plain attention on plain tensors: through its call forms (_calls.py).
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            o, lse = _varlen_apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                   deterministic)
        else:
            o, lse, _ = _calls.varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                                              causal, return_lse)
        return (o, lse) if return_lse else o
    _check_types("q k v cu_seqlens_q cu_seqlens_k", q, k, v, cu_seqlens_q, cu_seqlens_k)
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not _is_int(m) or not 0 <= m <= _INT_MAX:
            raise ValueError(f"{name} must be an int from 0 to 2^31 - 1 (the longest sequence), got {m!r}")
    q, k, v = _autocast(q, k, v)
    parts = _variant_of("varlen_attention", variant)
    if parts.document_ids is not None:
        raise ValueError("document_ids does not apply to varlen_attention: its sequences (cu_seqlens) are the documents")
    learnable = tuple(t.requires_grad and t.dtype == torch.float32 for t in parts.tensors)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or any(learnable) or
                                    (parts.sinks is not None and parts.sinks.requires_grad)):
        o, lse = _VarlenAttention.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                        deterministic, _variant_constants(parts), learnable, parts.alibi_slopes,
                                        parts.sinks, *parts.tensors)
    else:
        o, lse = _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, parts,
                                 return_lse)
    return (o, lse) if return_lse else o


@_with_variant_keywords
def _paged_outputs(q, out, layout: str, return_lse: bool):
    """(o, lse) a paged call writes: out (or a new tensor like q) and, with return_lse, a new lse."""
    if out is None:
        return _kernels._forward_outputs(q, _kernels._swap(layout), return_lse)
    return out, _kernels._forward_outputs(q, _kernels._swap(layout))[1] if return_lse else None


def paged_attention(q, k_cache, v_cache, block_table, cache_seqlens=None, *, causal: bool = False,
                    scale: float | None = None, layout: str = "bnhd", out=None, return_lse: bool = False, **variant):
    """Attention of q against a paged K/V cache (decode and chunked prefill; docs/attention.md §10).

    q is (b, n_q, h_q, d) for layout "bnhd" (FlashAttention's, the default) or (b, h_q, n_q, d)
    for "bhnd"; k_cache and v_cache are (num_pages, page_size, h_kv, d) (vLLM's and FlashInfer's
    NHD layout), page_size a power of two from 16 to 256, h_q % h_kv == 0. Batch b's key j is row
    j % page_size of page block_table[b, j // page_size] (int32 (b, max_pages)); cache_seqlens
    (int32 (b,), optional) gives each batch's key count (None: max_pages · page_size). causal is
    bottom-right per batch: query i sits at key cache_seqlens[b] - n_q + i. The variant keywords
    of `attention` apply (document_ids does not). The kernels trust block_table and cache_seqlens;
    KGEN_CHECK_INDICES=1 checks them on the host first (synchronous).

    Returns o (like q; written into `out` if given), or (o, lse) with return_lse, lse fp32
    (b, h_q, n_q). Forward only (no autograd): decode has no backward."""
    if (not variant and not _is_compiling() and _direct(q, k_cache, v_cache) and type(block_table) is _Tensor and
            block_table.layout is _strided and
            (cache_seqlens is None or (type(cache_seqlens) is _Tensor and cache_seqlens.layout is _strided)) and
            (out is None or (type(out) is _Tensor and out.layout is _strided))):
        # Plain attention on plain tensors: through its call form (_calls.py).
        o, lse = _paged_outputs(q, out, layout, return_lse)
        _calls.paged_forward_out(q, k_cache, v_cache, o, lse, block_table, cache_seqlens, scale, causal, layout)
        return (o, lse) if return_lse else o
    _check_types("q k_cache v_cache block_table cache_seqlens out", q, k_cache, v_cache, block_table, cache_seqlens,
                 out)
    q, k_cache, v_cache = _autocast(q, k_cache, v_cache)
    parts = _variant_of("paged_attention", variant)
    if _eager(q):
        o, lse = _paged_outputs(q, out, layout, return_lse)
        _kernels.paged_forward_out(q, k_cache, v_cache, o, lse, block_table, cache_seqlens, scale, causal, layout,
                                   parts)
    else:
        o, lse = _PAGED_FORWARD[1](q, k_cache, v_cache, block_table, cache_seqlens, scale, causal, layout, *parts)
        if out is not None:
            out.copy_(o)
            o = out
    return (o, lse) if return_lse else o


def paged_append(k, v, k_cache, v_cache, block_table, cache_seqlens, *, rotary_cos=None, rotary_sin=None,
                 rotary_interleaved: bool = False, q=None, q_out=None, q_sequential: bool = True,
                 layout: str = "bnhd"):
    """Writes new key and value rows into their pages (docs/attention.md §10), in place, on the
    current CUDA stream: row i of batch b of k and v ((b, n_new, h_kv, d) for layout "bnhd", (b,
    h_kv, n_new, d) for "bhnd") goes to position cache_seqlens[b] + i, i.e. row pos % page_size of
    page block_table[b, pos // page_size] of k_cache and v_cache (num_pages, page_size, h_kv, d).
    block_table None means contiguous caches (b_cache >= b, n_cache, h_kv, d). cache_seqlens
    (int32 (b,)) is not changed (add n_new after the step). Rows past the table are not written.

    rotary_cos and rotary_sin ((max_pos, rotary_dim / 2), the caches' dtype or float32, max_pos
    covering the table's rows) rotate the new keys at their positions (FlashAttention's
    convention): rotary_interleaved False rotates GPT-NeoX halves, True GPT-J pairs; values are
    copied. q (like k, with h_q heads), if given, is rotated too, at cache_seqlens[b] + i
    (q_sequential, FlashAttention's causal or windowed calls) or all at cache_seqlens[b], into
    q_out (None: in place). Returns the rotated q (q_out, or q), or None without q."""
    _check_types("k v k_cache v_cache block_table cache_seqlens rotary_cos rotary_sin q q_out", k, v, k_cache, v_cache,
                 block_table, cache_seqlens, rotary_cos, rotary_sin, q, q_out)
    _run(_PAGED_APPEND, k, v, k_cache, v_cache, block_table, cache_seqlens, rotary_cos, rotary_sin,
         bool(rotary_interleaved), q, q_out, bool(q_sequential), layout)
    return None if q is None else (q if q_out is None else q_out)


class PagedAttention:
    """Paged attention planned once per batch shape, run many times (FlashInfer's plan/run split;
    docs/attention.md §10, "Plan and run").

        wrapper = kgen.torch.PagedAttention()
        wrapper.plan(q, k_cache, v_cache, block_table, cache_seqlens, causal=True)
        o = wrapper.run(q, k_cache, v_cache, block_table, cache_seqlens)  # each step; graph-capturable

    plan takes paged_attention's arguments (tensors of the run's shapes, strides, dtypes and
    device; their contents do not matter, the variant's tensors and scalars are kept) and chooses
    the config and split count, loads the kernels and allocates the workspace (or takes
    `workspace`, a uint8 tensor, if it is large enough). run launches with no host
    synchronisation, no compilation and no allocation but its outputs (none with `out` and
    `lse`), so torch.cuda.graphs capture it; its tensors may be other buffers of the planned
    shapes and strides. Forward only, eager only (not traced by torch.compile)."""

    def __init__(self, workspace=None):
        self._workspace = workspace
        self._plan = None

    @_with_variant_keywords
    def plan(self, q, k_cache, v_cache, block_table, cache_seqlens=None, *, causal: bool = False,
             scale: float | None = None, layout: str = "bnhd", return_lse: bool = False, **variant):
        _check_types("q k_cache v_cache block_table cache_seqlens", q, k_cache, v_cache, block_table, cache_seqlens)
        parts = _variant_of("PagedAttention.plan", variant)
        o, lse = _kernels._forward_outputs(q, _kernels._swap(layout))
        self._plan = _kernels.paged_plan(q, k_cache, v_cache, o, lse, block_table, cache_seqlens, scale, causal,
                                         layout, parts)
        need = self._plan.workspace_bytes
        if need and (self._workspace is None or self._workspace.numel() * self._workspace.element_size() < need):
            self._workspace = torch.empty(need, dtype=torch.uint8, device=q.device)
        self._layout, self._return_lse = layout, bool(return_lse)
        return self

    @property
    def config(self) -> str:
        """The planned config's text."""
        return self._plan.config

    @property
    def splits(self) -> int:
        """Key ranges per query row of the planned call (1: none)."""
        return self._plan.splits

    def run(self, q, k_cache, v_cache, block_table, cache_seqlens=None, *, out=None, lse=None):
        """o (like q; into `out` if given), or (o, lse) when planned with return_lse (into `lse` if
        given, fp32 (b, h_q, n_q))."""
        if self._plan is None:
            raise RuntimeError("PagedAttention.run: call plan(...) first")
        if out is None or (self._return_lse and lse is None):
            o, l = _kernels._forward_outputs(q, _kernels._swap(self._layout))
            out = o if out is None else out
            lse = l if lse is None else lse
        _kernels.paged_run(self._plan, q, k_cache, v_cache, out, lse, block_table, cache_seqlens, self._workspace,
                           self._layout)
        return (out, lse) if self._return_lse else out


# --- LRPE-cosine (docs/lrpe.md) -------------------------------------------------------------------

LRPE_ACTS = ("none", "relu", "sigmoid", "silu", "softmax")


def _lrpe_act(act: str, dim, x: torch.Tensor, layout: str) -> str:
    """The library's act name: softmax over the features (dim -1) or over the sequence (the n
    axis of `layout`: dim -2 / 2 for bhnd and 3-d (b, n, d) inputs, -3 / 1 for bnhd)."""
    if act not in LRPE_ACTS:
        raise ValueError(f"act must be one of {LRPE_ACTS}, got {act!r}")
    if act != "softmax":
        if dim is not None:
            raise ValueError(f"dim applies to act='softmax' only, got dim={dim} with act={act!r}")
        return act
    ndim = x.dim()
    seq_axis = 1 if (layout == "bnhd" or ndim == 3) else 2
    if dim is None or dim in (-1, ndim - 1):
        return "softmax"
    if dim in (seq_axis, seq_axis - ndim):
        return "softmax_seq"
    raise ValueError(f"dim must be -1 (features) or the sequence axis ({seq_axis} or {seq_axis - ndim}) "
                     f"for layout {layout!r}, got {dim}")


def _theta32(theta):
    """theta as float32 2-d (rows, cols): a 1-d theta of features is shared by all heads. Runs
    where autograd does not record (theta gets no gradient)."""
    _check_types("theta", theta)
    if theta.dim() == 1:
        theta = theta[None, :]
    return theta if theta.dtype == torch.float32 else theta.float()


def _lrpe_forward(x, theta32, md, offset, grid, extra, act, layout, cache, config):
    """(o, angles or None) of either op by kgen's forward kernel (no autograd)."""
    if not md:
        return _run(_LRPE_FORWARD, x, theta32, offset, act, layout, config), None
    if cache:
        return _run(_MD_LRPE_FORWARD_CACHED, x, theta32, grid, extra, act, layout, config)
    return _run(_MD_LRPE_FORWARD, x, theta32, grid, extra, act, layout, config), None


def _lrpe_backward(x, theta32, d_o, md, offset, grid, extra, act, layout, angles, config):
    """dx of either op by kgen's backward kernel (no autograd)."""
    if md:
        return _run(_MD_LRPE_BACKWARD, x, theta32, d_o, angles, grid, extra, act, layout, config)
    return _run(_LRPE_BACKWARD, x, theta32, d_o, offset, act, layout, config)


def _lrpe_apply(x, theta, *args):
    """The autograd Function when autograd records the call, else the forward kernel alone (the
    Function's bookkeeping costs host time on every call)."""
    if torch.is_grad_enabled() and (x.requires_grad or getattr(theta, "requires_grad", False)):
        return _Lrpe.apply(x, theta, *args)
    return _lrpe_forward(x, _theta32(theta), *args)[0]


class _Lrpe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, theta, md, offset, grid, extra, act, layout, cache, config):
        theta32 = _theta32(theta)
        o, angles = _lrpe_forward(x, theta32, md, offset, grid, extra, act, layout, cache, config)
        ctx.save_for_backward(x, theta32, angles)
        ctx.args = (md, offset, grid, extra, act, layout, config)
        return o

    @staticmethod
    def backward(ctx, d_o):
        x, theta32, angles = ctx.saved_tensors
        md, offset, grid, extra, act, layout, config = ctx.args
        dx = _lrpe_backward(x, theta32, d_o, md, offset, grid, extra, act, layout, angles, config)
        return dx, None, None, None, None, None, None, None, None, None


def lrpe_cosine_backward(x, theta, d_o, offset: int = 0, act: str = "none", dim=None, layout: str = "bhnd"):
    """dx of lrpe_cosine for dO = d_o, by kgen's backward kernel alone (no autograd): what
    bench/compare_lrpe.py times as kgen's kernel-only backward."""
    _check_types("x d_o", x, d_o)
    return _lrpe_backward(x, _theta32(theta), d_o, False, int(offset), (), 0, _lrpe_act(act, dim, x, layout), layout,
                          None, None)


def md_lrpe_cosine_backward(x, theta, d_o, shape, l: int = 0, act: str = "none", dim=None, layout: str = "bhnd"):
    """dx of md_lrpe_cosine (no angle cache) by kgen's backward kernel alone."""
    _check_types("x d_o", x, d_o)
    return _lrpe_backward(x, _theta32(theta), d_o, True, 0, _grid(shape), int(l), _lrpe_act(act, dim, x, layout),
                          layout, None, None)


def _grid(shape) -> tuple:
    shape = tuple(int(v) for v in shape)
    if not 1 <= len(shape) <= 3:
        raise ValueError(f"shape must have 1, 2 or 3 sizes, got {shape}")
    return shape


def lrpe_cosine(x, theta, offset: int = 0, act: str = "none", dim=None, layout: str = "bhnd",
                config: str | None = None):
    """o = [act(x)·cos Θ, act(x)·sin Θ] with Θ[s, h, k] = (offset + s)·θ[h, k], differentiable in x.

    x is (b, h, n, d) for layout "bhnd", (b, n, h, d) for "bnhd", or (b, n, d) for one head; any
    strides with a contiguous last dim; float16, bfloat16 or float32 (fp32 math); under
    torch.autocast("cuda"), a floating x is cast to the autocast dtype. theta is (h, d), (h, 1),
    (1, d) or (d,) (converted to float32). act: none, relu, sigmoid, silu or softmax, with dim -1
    (features) or the sequence axis (softmax over the sequence). o has x's layout with 2d
    features, the cos half first. Runs on the current CUDA stream; the backward runs kgen's
    backward kernels (theta gets no gradient). config forces a kernel config.
    """
    _check_types("x", x)
    x, = _autocast(x)
    return _lrpe_apply(x, theta, False, int(offset), (), 0, _lrpe_act(act, dim, x, layout), layout, False, config)


def md_lrpe_cosine(x, theta, shape, l: int = 0, act: str = "none", dim=None, layout: str = "bhnd",
                   cache: bool = False, config: str | None = None):
    """Multi-dimensional LRPE-cosine: token s >= l sits at the coordinates of s - l on the grid
    `shape` (1 to 3 sizes, row-major, last fastest; n = l + prod(shape)); feature k uses spatial
    dim j = k // e with frequency theta[h, k - j·e], e = theta's last dim (e·len(shape) >= d);
    the l extra tokens get angle 0. cache=True keeps the angles (float32 (h, n, d)) from the
    forward for the backward. Otherwise as lrpe_cosine.
    """
    _check_types("x", x)
    shape = _grid(shape)
    x, = _autocast(x)
    return _lrpe_apply(x, theta, True, 0, shape, int(l), _lrpe_act(act, dim, x, layout), layout, bool(cache), config)


from .flex import FlexTraceError, flex_attention  # noqa: E402 - FlexAttention callables on kgen (kgen/flex.py)
