"""PyTorch SDPA's flash backend on kgen, through torch.nn.attention's flash-attention registry
(register_flash_attention_impl / activate_flash_attention_impl, PyTorch 2.11 and later):

    import kgen.integrations.torch_sdpa as kgen_sdpa
    kgen_sdpa.activate()                       # torch.nn.attention.activate_flash_attention_impl("kgen")
    F.scaled_dot_product_attention(q, k, v, is_causal=True)   # where SDPA picks its flash backend
    torch.nn.attention.restore_flash_attention_impl()          # back to PyTorch's own

Activation overrides, for CUDA tensors, the two aten operators SDPA's flash backend calls,
_scaled_dot_product_flash_attention and its backward, with kgen's forward and backward kernels
(as PyTorch's own FA3/FA4 registrations do); calls SDPA sends to its other backends (a mask,
fp32, ...) do not change. SDPA's is_causal is top-left aligned (key j <= query i), which kgen's
causal=True matches only when n_q = n_k; other shapes run kgen's causal_top_left variant.
Dropout and return_debug_mask raise RuntimeError, as PyTorch's FA3/FA4 do: select another backend
(torch.nn.attention.sdpa_kernel) for dropout. Inputs arrive as (b, h, n, d); GQA (enable_gqa)
as kgen serves it. torch.are_deterministic_algorithms_enabled() makes the backward deterministic.
Without the registry in the installed PyTorch, register() and activate() raise RuntimeError.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.library import Library

from .. import torch as kgen_torch

__all__ = ["register", "activate", "available"]


def available() -> bool:
    """Whether the installed PyTorch has the flash-attention registry."""
    attention = torch.nn.attention
    return hasattr(attention, "register_flash_attention_impl") and hasattr(attention, "activate_flash_attention_impl")


def register(name: str = "kgen") -> str:
    """Register kgen as flash-attention implementation `name` (activated by
    torch.nn.attention.activate_flash_attention_impl(name)). Returns name."""
    if not available():
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.attention.register_flash_attention_impl "
                           "(PyTorch 2.11 and later have it)")
    torch.nn.attention.register_flash_attention_impl(name, register_fn=_install)
    return name


def activate(name: str = "kgen") -> None:
    """Register kgen as `name` and activate it: SDPA's flash backend runs kgen from now on."""
    torch.nn.attention.activate_flash_attention_impl(register(name))


@dataclass
class _Handle:
    """What the registry keeps while kgen is active; remove() drops the aten overrides."""
    library: Library | None

    def remove(self) -> None:
        self.library = None  # the overrides go with the Library object


def _install() -> _Handle:
    library = Library("aten", "IMPL", "CUDA")
    library.impl("_scaled_dot_product_flash_attention", flash_forward, "CUDA")
    library.impl("_scaled_dot_product_flash_attention_backward", flash_backward, "CUDA")
    return _Handle(library)


def _refuse(what: str, dropout_p: float, return_debug_mask: bool = False) -> None:
    if dropout_p:
        raise RuntimeError(f"kgen's SDPA flash {what}: dropout_p={dropout_p} is unsupported (kgen has no dropout; "
                           "choose another backend with torch.nn.attention.sdpa_kernel)")
    if return_debug_mask:
        raise RuntimeError(f"kgen's SDPA flash {what}: return_debug_mask is unsupported")


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def flash_forward(query, key, value, dropout_p: float = 0.0, is_causal: bool = False,
                  return_debug_mask: bool = False, *, scale: float | None = None):
    """aten::_scaled_dot_product_flash_attention on kgen: (output (b, h, n_q, d) with query's
    layout, logsumexp fp32 (b, h, n_q), cum_seq_q, cum_seq_k (None: dense), max_q, max_k,
    rng_state, unused, debug_attn_mask)."""
    _refuse("forward", dropout_p, return_debug_mask)
    n_q, n_k = query.shape[2], key.shape[2]
    top_left = {"causal_top_left": True} if is_causal and n_q != n_k else {}
    q, k, v = _dense(query), _dense(key), _dense(value)
    out = torch.empty_like(q)  # SDPA returns its output in query's memory layout
    _, lse = kgen_torch.attention_forward(q, k, v, causal=is_causal and not top_left, scale=scale, layout="bhnd",
                                          out=out, return_lse=True, **top_left)
    rng_state = torch.zeros((2,), dtype=torch.uint64, device=query.device)
    unused = torch.zeros((), dtype=torch.uint64, device=query.device)
    debug_mask = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, lse, None, None, n_q, n_k, rng_state, unused, debug_mask


def flash_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                   dropout_p: float, is_causal: bool, philox_seed, philox_offset, *, scale: float | None = None):
    """aten::_scaled_dot_product_flash_attention_backward on kgen: (grad_query, grad_key, grad_value)."""
    _refuse("backward", dropout_p)
    q, k, v, o, d_o = (_dense(t) for t in (query, key, value, out, grad_out))
    deterministic = torch.are_deterministic_algorithms_enabled()
    if is_causal and q.shape[2] != k.shape[2]:
        dq, dk, dv, _, _ = torch.ops.kgen.attention_backward_variant(
            q, k, v, o, logsumexp, d_o, scale, False, "bhnd", deterministic, None, None, causal_top_left=True)
        return dq, dk, dv
    return kgen_torch.attention_backward(q, k, v, o, logsumexp, d_o, causal=is_causal, scale=scale, layout="bhnd",
                                         deterministic=deterministic)
