"""PyTorch front end: kgen operators on torch tensors, zero-copy through DLPack descriptors.

Each operator is one small function: map its arguments to logical (b, h, n, d) views, allocate
missing outputs, and `_launch` the C function on the current CUDA stream. Shapes, dtypes, devices
and strides are validated by the C library alone, so the messages are the same in every language;
Python checks only what C cannot see (argument types, the layout name, scale=None vs a value).
`attention` is the differentiable attention: an autograd function whose backward runs kgen's
backward kernels and is itself differentiable through kgen's double-backward kernels;
attention_forward/backward/double_backward are the raw operators (autograd does not see them).
lrpe_cosine and md_lrpe_cosine are autograd Functions whose backward runs kgen's backward
kernels (theta gets no gradient, as in the reference library).
"""
from __future__ import annotations

import ctypes

import torch

from . import _lib
from ._lib import KgenError

__all__ = ["attention", "attention_forward", "attention_backward", "attention_double_backward",
           "lrpe_cosine", "md_lrpe_cosine", "lrpe_cosine_backward", "md_lrpe_cosine_backward", "KgenError",
           "LAYOUTS", "LRPE_ACTS"]
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


_DL_DTYPES: dict = {}  # torch.dtype → (DLDataTypeCode, bits), filled on first use


def _dl(t: torch.Tensor) -> _lib.DLTensor:
    """A DLTensor viewing `t` in place: data_ptr() already includes the storage offset."""
    dtype = _DL_DTYPES.get(t.dtype) or _DL_DTYPES.setdefault(t.dtype, _dtype(t.dtype))
    return _lib.dltensor(t.data_ptr(), t.shape, t.stride(), dtype, _device(t.device))


# The current stream's handle without building a torch.cuda.Stream object (4 µs per call): the
# raw-stream query PyTorch's own generated code uses, where this PyTorch has it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device: torch.device):
    if device.type != "cuda":
        return None
    if _raw_stream is not None and device.index is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


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
    _lib.call(function, *map(_lib.ref, dls), ctypes.byref(options), _stream(device))


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


def _attach_scratch(options, nbytes: int, device: torch.device) -> torch.Tensor:
    """`nbytes` of scratch from PyTorch's caching allocator (freed stream-ordered like every torch
    allocation), set as options.workspace; keep the tensor alive until the launch is enqueued."""
    ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    options.workspace, options.workspace_bytes = ws.data_ptr(), nbytes
    return ws


def _workspace(q_logical: torch.Tensor, options, double_backward: bool) -> torch.Tensor:
    """The backward's or double backward's scratch for q's shape."""
    size = ctypes.c_size_t(0)
    _lib.call("kgen_attention_backward_workspace_bytes", _lib.ref(_dl(q_logical)), ctypes.byref(options),
              int(double_backward), ctypes.byref(size))
    return _attach_scratch(options, size.value, q_logical.device)


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
                              scale: float | None = None, layout: str = "bhnd", deterministic: bool = False,
                              config: str | None = None):
    """(q_bar, k_bar, v_bar, do_bar): gradients of an outer loss with respect to q, k, v and d_o,
    given its cotangents gq, gk, gv of the backward's dq, dk, dv (None = zero, work skipped).
    O(n·d) memory (docs/attention.md §4). deterministic=True gives the same bits on every run."""
    _check_types(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, gq=gq, gk=gk, gv=gv)
    d_o, gq, gk, gv = (_dense(t) for t in (d_o, gq, gk, gv))
    outs = [torch.empty_like(t) for t in (q, k, v, q)]
    options = _backward_options(causal, scale, deterministic, config)
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
        ctx.options = (causal, scale, layout, deterministic)
        return attention_backward(q, k, v, o, lse, d_o, causal=causal, scale=scale, layout=layout,
                                  deterministic=deterministic)

    @staticmethod
    def backward(ctx, gq, gk, gv):
        q, k, v, o, lse, d_o = ctx.saved_tensors
        causal, scale, layout, deterministic = ctx.options
        if gq is None and gk is None and gv is None:
            return (None,) * 10
        q_bar, k_bar, v_bar, do_bar = attention_double_backward(q, k, v, o, lse, d_o, gq, gk, gv, causal=causal,
                                                                scale=scale, layout=layout, deterministic=deterministic)
        return q_bar, k_bar, v_bar, None, None, do_bar, None, None, None, None


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, deterministic):
        # Without this, autograd would hand backward a zero d_o whenever o gets no gradient (the
        # second grad reaches this node through o, whose gradient the double backward leaves
        # None) and run a whole first-order backward on zeros.
        ctx.set_materialize_grads(False)
        o, lse = attention_forward(q, k, v, causal=causal, scale=scale, layout=layout, return_lse=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = (causal, scale, layout, deterministic)
        return o

    @staticmethod
    def backward(ctx, d_o):
        if d_o is None:
            return (None,) * 7
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


def _lrpe_views(tensors, layout):
    """(b, h, n, ·) views of 4-d tensors in `layout`; 3-d (b, n, ·) tensors pass unchanged."""
    return [None if t is None else (_logical(t, layout) if t.dim() == 4 else t) for t in tensors]


def _theta32(theta):
    """theta as float32 2-d (rows, cols): a 1-d theta of features is shared by all heads."""
    _check_types(theta=theta)
    theta = theta.detach()
    if theta.dim() == 1:
        theta = theta[None, :]
    return theta if theta.dtype == torch.float32 else theta.float()


def _lrpe_forward(x, theta, md, offset, grid, extra, act, layout, cache, config):
    """(o, float32 theta, angles or None) of either op by kgen's forward kernel (no autograd)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    theta32 = _theta32(theta)
    o = torch.empty((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
    angles = None
    if cache:
        h, n = (1, x.shape[1]) if x.dim() == 3 else ((x.shape[2], x.shape[1]) if layout == "bnhd" else x.shape[1:3])
        angles = torch.empty((h, n, x.shape[-1]), dtype=torch.float32, device=x.device)
    options = _lrpe_options(act, offset, grid, extra, config)
    xv, ov = _lrpe_views([x, o], layout)
    ws = _lrpe_workspace(xv, act, False, options)
    if md:
        _launch("kgen_md_lrpe_cosine_forward", [xv, theta32, ov, angles], options, x.device)
    else:
        _launch("kgen_lrpe_cosine_forward", [xv, theta32, ov], options, x.device)
    del ws
    return o, theta32, angles


def _lrpe_apply(x, theta, *args):
    """The autograd Function when autograd records the call, else the forward kernel alone (the
    Function's bookkeeping costs host time on every call)."""
    if torch.is_grad_enabled() and (x.requires_grad or getattr(theta, "requires_grad", False)):
        return _Lrpe.apply(x, theta, *args)
    return _lrpe_forward(x, theta, *args)[0]


class _Lrpe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, theta, md, offset, grid, extra, act, layout, cache, config):
        o, theta32, angles = _lrpe_forward(x, theta, md, offset, grid, extra, act, layout, cache, config)
        ctx.save_for_backward(x, theta32, angles)
        ctx.args = (md, offset, grid, extra, act, layout, config)
        return o

    @staticmethod
    def backward(ctx, d_o):
        x, theta32, angles = ctx.saved_tensors
        md, offset, grid, extra, act, layout, config = ctx.args
        dx = _lrpe_backward(x, theta32, d_o, md, offset, grid, extra, act, layout, angles, config)
        return dx, None, None, None, None, None, None, None, None, None


def _lrpe_backward(x, theta32, d_o, md, offset, grid, extra, act, layout, angles, config):
    """dx of either op by kgen's backward kernel (no autograd)."""
    if d_o.stride(-1) != 1:
        d_o = d_o.contiguous()
    dx = torch.empty_like(x)
    options = _lrpe_options(act, offset, grid, extra, config)
    xv, dov, dxv = _lrpe_views([x, d_o, dx], layout)
    ws = _lrpe_workspace(xv, act, True, options)
    if md:
        _launch("kgen_md_lrpe_cosine_backward", [xv, theta32, dov, dxv, angles], options, x.device)
    else:
        _launch("kgen_lrpe_cosine_backward", [xv, theta32, dov, dxv], options, x.device)
    del ws
    return dx


def lrpe_cosine_backward(x, theta, d_o, offset: int = 0, act: str = "none", dim=None, layout: str = "bhnd"):
    """dx of lrpe_cosine for dO = d_o, by kgen's backward kernel alone (no autograd): what
    bench/compare_lrpe.py times as kgen's kernel-only backward."""
    _check_types(x=x, d_o=d_o)
    return _lrpe_backward(x, _theta32(theta), d_o, False, int(offset), (), 0, _lrpe_act(act, dim, x, layout), layout,
                          None, None)


def md_lrpe_cosine_backward(x, theta, d_o, shape, l: int = 0, act: str = "none", dim=None, layout: str = "bhnd"):
    """dx of md_lrpe_cosine (no angle cache) by kgen's backward kernel alone."""
    _check_types(x=x, d_o=d_o)
    return _lrpe_backward(x, _theta32(theta), d_o, True, 0, tuple(int(v) for v in shape), int(l),
                          _lrpe_act(act, dim, x, layout), layout, None, None)


def _lrpe_workspace(x_view, act, backward, options):
    """Softmax over the sequence: its statistics scratch, else None (no scratch needed)."""
    if act != "softmax_seq":
        return None
    size = ctypes.c_size_t(0)
    _lib.call("kgen_lrpe_workspace_bytes", _lib.ref(_dl(x_view)), _lib.LRPE_ACTS[act], int(backward), ctypes.byref(size))
    return _attach_scratch(options, size.value, x_view.device)


def _lrpe_options(act, offset, grid, extra, config):
    o = _lib.LrpeOptions(act=_lib.LRPE_ACTS[act], offset=int(offset), dims=len(grid), extra=int(extra),
                         config=config.encode() if config else None)
    for j, v in enumerate(grid):
        o.grid[j] = int(v)
    return o


def lrpe_cosine(x, theta, offset: int = 0, act: str = "none", dim=None, layout: str = "bhnd",
                config: str | None = None):
    """o = [act(x)·cos Θ, act(x)·sin Θ] with Θ[s, h, k] = (offset + s)·θ[h, k], differentiable in x.

    x is (b, h, n, d) for layout "bhnd", (b, n, h, d) for "bnhd", or (b, n, d) for one head; any
    strides with a contiguous last dim; float16, bfloat16 or float32 (fp32 math). theta is
    (h, d), (h, 1), (1, d) or (d,) (converted to float32). act: none, relu, sigmoid, silu or
    softmax, with dim -1 (features) or the sequence axis (softmax over the sequence). o has x's
    layout with 2d features, the cos half first. Runs on the current CUDA stream; the backward
    runs kgen's backward kernels (theta gets no gradient). config forces a kernel config.
    """
    _check_types(x=x)
    return _lrpe_apply(x, theta, False, int(offset), (), 0, _lrpe_act(act, dim, x, layout), layout, False, config)


def md_lrpe_cosine(x, theta, shape, l: int = 0, act: str = "none", dim=None, layout: str = "bhnd",
                   cache: bool = False, config: str | None = None):
    """Multi-dimensional LRPE-cosine: token s >= l sits at the coordinates of s - l on the grid
    `shape` (1 to 3 sizes, row-major, last fastest; n = l + prod(shape)); feature k uses spatial
    dim j = k // e with frequency theta[h, k - j·e], e = theta's last dim (e·len(shape) >= d);
    the l extra tokens get angle 0. cache=True keeps the angles (float32 (h, n, d)) from the
    forward for the backward. Otherwise as lrpe_cosine.
    """
    _check_types(x=x)
    shape = tuple(int(v) for v in shape)
    if not 1 <= len(shape) <= 3:
        raise ValueError(f"shape must have 1, 2 or 3 sizes, got {shape}")
    return _lrpe_apply(x, theta, True, 0, shape, int(l), _lrpe_act(act, dim, x, layout), layout, bool(cache), config)
