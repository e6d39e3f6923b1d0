"""PyTorch front end: kgen operators on torch tensors, zero-copy through DLPack descriptors.

Each operator is one small function: map its arguments to logical (b, h, n, d) views, allocate
missing outputs, and `_launch` the C function on the current CUDA stream. Shapes, dtypes, devices
and strides are validated by the C library alone, so the messages are the same in every language;
Python checks only what C cannot see (argument types, the layout name, scale=None vs a value).
The functions are not differentiable (autograd does not see them).
"""
from __future__ import annotations

import ctypes

import torch

from . import _lib
from ._lib import KgenError

__all__ = ["attention_forward", "KgenError", "LAYOUTS"]
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
