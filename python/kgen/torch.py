"""PyTorch front end: kgen operators on torch tensors, zero-copy through DLPack descriptors.

Each operator is one small function: map its arguments to logical (b, h, n, d) views, allocate
missing outputs, and `_launch` the C function on the current CUDA stream. Shapes, dtypes, devices
and strides are validated by the C library alone, so the messages are the same in every language;
Python checks only what C cannot see (argument types, the layout name, scale=None vs a value).
`attention` is the differentiable entry point: an autograd function whose backward runs kgen's
backward kernels and is itself differentiable through kgen's double-backward kernels. The other
functions are the raw operators (autograd does not see them).
"""
from __future__ import annotations

import ctypes

import torch

from . import _lib
from ._lib import KgenError

__all__ = ["attention", "attention_forward", "attention_backward", "attention_double_backward", "KgenError",
           "LAYOUTS"]
LAYOUTS = ("bhnd", "bnhd")


def _dtype(dtype: torch.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of any torch dtype; the library decides which ones it supports."""
    if dtype == torch.bfloat16:
        code = _lib.kDLBfloat
    elif dtype.is_complex:
        code = _lib.kDLComplex
    elif dtype.is_floating_point:
        code = _lib.kDLFloat
    elif dtype == torch.bool:
        code = _lib.kDLUInt  # DLPack 0.6 has no bool code
    else:
        code = _lib.kDLInt if dtype.is_signed else _lib.kDLUInt
    return code, dtype.itemsize * 8


def _device(device: torch.device) -> tuple[int, int]:
    if device.type == "cuda":
        return (_lib.kDLROCM if torch.version.hip else _lib.kDLCUDA), device.index
    if device.type == "cpu":
        return _lib.kDLCPU, 0
    return _lib.kDLExtDev, device.index or 0


def _dl(t: torch.Tensor) -> _lib.DLTensor:
    """A DLTensor viewing `t` in place: data_ptr() already includes the storage offset."""
    return _lib.dltensor(t.data_ptr(), t.shape, t.stride(), _dtype(t.dtype), _device(t.device))


def _check_types(**tensors: torch.Tensor | None) -> None:
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.layout != torch.strided:
            raise TypeError(f"{name} must be a strided (dense) tensor, got {t.layout}")


def _logical(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The (b, h, n, d) view of a tensor given in `layout` (a view, never a copy). Tensors that
    are not 4-d pass unchanged so that the library reports the shape error."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return t.transpose(1, 2) if layout == "bnhd" and t.dim() == 4 else t


def _launch(function: str, tensors: list[torch.Tensor | None], options, device: torch.device):
    """Call C `function(tensors..., &options, stream)` on the current stream of `device`."""
    dls = [None if t is None else _dl(t) for t in tensors]
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    _lib.call(function, *map(_lib.ref, dls), ctypes.byref(options), stream)


def attention_forward(q, k, v, *, causal: bool = False, scale: float | None = None,
                      layout: str = "bhnd", out=None, lse=None, return_lse: bool = False):
    """o = softmax(scale·q·kᵀ + mask)·v, computed asynchronously on the current CUDA stream.

    q is (b, h_q, n_q, d) for layout "bhnd" or (b, n_q, h_q, d) for "bnhd"; k and v likewise
    with h_kv heads (h_q % h_kv == 0) and n_k keys; any strides with a contiguous last dim.
    dtypes float16/bfloat16 (tensor cores, fp32 accumulation) or float32 (fp32 math, no tf32).
    scale defaults to 1/sqrt(d). causal masks key j for j > i + (n_k - n_q) (bottom-right
    aligned, like FlashAttention-2 and SDPA); rows with every key masked give o = 0, lse = -inf.

    out (same layout and shape as q) is written in place if given, else allocated contiguous in
    q's layout. lse is the fp32 natural-log logsumexp of the scaled scores, shape (b, h_q, n_q)
    in either layout, unit stride along n_q; it is computed only if `lse` is given or
    return_lse is True. Returns out, or (out, lse) if return_lse.
    """
    _check_types(q=q, k=k, v=v, out=out, lse=lse)
    if scale is not None and not scale > 0:
        raise ValueError(f"scale must be positive (None means 1/sqrt(d)), got {scale}")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if lse is None and return_lse:
        lse = torch.empty(_logical(q, layout).shape[:-1], dtype=torch.float32, device=q.device)
    options = _lib.AttentionOptions(scale=scale or 0.0, causal=int(bool(causal)))
    views = [_logical(t, layout) for t in (q, k, v, out)]
    _launch("kgen_attention_forward", [*views, lse], options, q.device)
    return (out, lse) if return_lse else out


def _dense(t: torch.Tensor | None) -> torch.Tensor | None:
    """`t` itself when its last dim is contiguous and no stride is 0 (autograd hands out expanded
    zero-stride gradients), else a contiguous copy."""
    if t is None:
        return None
    if t.stride(-1) == 1 and all(s != 0 or n == 1 for s, n in zip(t.stride(), t.shape)):
        return t
    return t.contiguous()


def _workspace(q_logical: torch.Tensor, options, double_backward: bool) -> torch.Tensor:
    """Scratch from PyTorch's caching allocator (stream-ordered like every torch allocation)."""
    size = ctypes.c_size_t(0)
    _lib.call("kgen_attention_backward_workspace_bytes", _lib.ref(_dl(q_logical)), ctypes.byref(options),
              int(double_backward), ctypes.byref(size))
    ws = torch.empty(max(size.value, 1), dtype=torch.uint8, device=q_logical.device)
    options.workspace = ws.data_ptr()
    options.workspace_bytes = size.value
    return ws


def _backward_options(causal: bool, scale: float | None, deterministic: bool, config: str | None = None):
    if scale is not None and not scale > 0:
        raise ValueError(f"scale must be positive (None means 1/sqrt(d)), got {scale}")
    return _lib.AttentionBackwardOptions(scale=scale or 0.0, causal=int(bool(causal)),
                                         deterministic=int(bool(deterministic)),
                                         config=config.encode() if config else None)


def attention_backward(q, k, v, o, lse, d_o, *, causal: bool = False, scale: float | None = None,
                       layout: str = "bhnd", deterministic: bool = False, dq=None, dk=None, dv=None,
                       config: str | None = None):
    """(dq, dk, dv): gradients of attention_forward given d_o = ∂L/∂o, o and lse (the forward's
    outputs, lse fp32 (b, h_q, n_q)). Same shapes, layouts and dtypes as attention_forward; dk and
    dv sum over the query heads of each kv group. deterministic=True gives the same bits on every
    run (no atomics). Outputs are allocated like q and k unless given. config forces a kernel
    config ("fa2:bm64:bn128:w8"); None = kgen's choice."""
    _check_types(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=dq, dk=dk, dv=dv)
    d_o = _dense(d_o)
    dq = torch.empty_like(q) if dq is None else dq
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    options = _backward_options(causal, scale, deterministic, config)
    views = [_logical(t, layout) for t in (q, k, v, o)] + [lse] + [_logical(t, layout) for t in (d_o, dq, dk, dv)]
    ws = _workspace(views[0], options, False)
    _launch("kgen_attention_backward", views, options, q.device)
    del ws  # freed stream-ordered: the caching allocator reuses it only after the launch's stream work
    return dq, dk, dv


def attention_double_backward(q, k, v, o, lse, d_o, gq=None, gk=None, gv=None, *, causal: bool = False,
                              scale: float | None = None, layout: str = "bhnd", config: str | None = None):
    """(q_bar, k_bar, v_bar, do_bar): gradients of an outer loss with respect to q, k, v and d_o,
    given its cotangents gq, gk, gv of the backward's dq, dk, dv (None = zero, work skipped).
    O(n·d) memory (attention.md §4)."""
    _check_types(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, gq=gq, gk=gk, gv=gv)
    d_o, gq, gk, gv = (_dense(t) for t in (d_o, gq, gk, gv))
    outs = [torch.empty_like(t) for t in (q, k, v, q)]
    options = _backward_options(causal, scale, False, config)
    views = ([_logical(t, layout) for t in (q, k, v, o)] + [lse] +
             [None if t is None else _logical(t, layout) for t in (d_o, gq, gk, gv)] +
             [_logical(t, layout) for t in outs])
    ws = _workspace(views[0], options, True)
    _launch("kgen_attention_double_backward", views, options, q.device)
    del ws
    return tuple(outs)


class _AttentionBackward(torch.autograd.Function):
    """(q, k, v, o, lse, d_o) -> (dq, dk, dv); its backward is kgen's double backward, which
    accounts for every dependence of dq, dk, dv on (q, k, v, d_o) (o and lse only cache
    intermediates of q, k, v, so they get no gradient here)."""

    @staticmethod
    def forward(ctx, q, k, v, o, lse, d_o, causal, scale, layout, deterministic):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, o, lse, d_o)
        ctx.options = (causal, scale, layout)
        return attention_backward(q, k, v, o, lse, d_o, causal=causal, scale=scale, layout=layout,
                                  deterministic=deterministic)

    @staticmethod
    def backward(ctx, gq, gk, gv):
        q, k, v, o, lse, d_o = ctx.saved_tensors
        causal, scale, layout = ctx.options
        if gq is None and gk is None and gv is None:
            return (None,) * 10
        q_bar, k_bar, v_bar, do_bar = attention_double_backward(q, k, v, o, lse, d_o, gq, gk, gv, causal=causal,
                                                                scale=scale, layout=layout)
        return q_bar, k_bar, v_bar, None, None, do_bar, None, None, None, None


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, deterministic):
        o, lse = attention_forward(q, k, v, causal=causal, scale=scale, layout=layout, return_lse=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = (causal, scale, layout, deterministic)
        return o

    @staticmethod
    def backward(ctx, d_o):
        q, k, v, o, lse = ctx.saved_tensors
        causal, scale, layout, deterministic = ctx.options
        dq, dk, dv = _AttentionBackward.apply(q, k, v, o, lse, d_o, causal, scale, layout, deterministic)
        return dq, dk, dv, None, None, None, None


def attention(q, k, v, *, causal: bool = False, scale: float | None = None, layout: str = "bhnd",
              deterministic: bool = False):
    """Differentiable attention: o = softmax(scale·q·kᵀ + mask)·v on kgen's kernels.

    Arguments as attention_forward (BHND or BNHD, GQA, fp16/bf16/fp32, current stream). Its
    backward runs kgen's backward kernels and is differentiable again through kgen's double
    backward, so torch.autograd.grad(..., create_graph=True) followed by a second grad runs on
    kgen kernels with O(n·d) memory."""
    _check_types(q=q, k=k, v=v)
    return _Attention.apply(q, k, v, causal, scale, layout, deterministic)
