"""FlashAttention 2's Python interface on kgen's kernels: `from kgen.flash_attn_interface import
flash_attn_func` in place of `from flash_attn import flash_attn_func`.

Same argument names, layouts ((b, n, h, d), GQA with h % h_kv == 0) and return values as
flash-attn 2.7/2.8, including the private pair `_flash_attn_forward` / `_flash_attn_backward`
that ring attention (ring-flash-attention, yunchang) calls. Each function maps onto kgen.torch
(docs/python.md §7): causal is bottom-right aligned in both; window_size, softcap and
alibi_slopes become kgen's presets, or an expression where FlashAttention's order of operations
(softcap first, then the ALiBi bias) or its (b, h) slopes differ from the presets; a KV cache with
per-sequence lengths becomes a mask expression on an int32 tensor of the lengths.

Differences from FlashAttention 2: softmax_lse is the logsumexp of the scores the softmax sees,
-inf for a row that sees no key (FlashAttention gives +inf there, and with causal ALiBi it adds
slope·(i + n_k - n_q) to each row); S_dmask is None. What kgen does not serve (dropout, paged
caches in the varlen functions, cache_batch_idx) raises NotImplementedError naming the argument.
"""
from __future__ import annotations

import inspect

try:
    import torch
except ImportError as error:  # the package and the CLI need no PyTorch; this module does
    raise ImportError("kgen.flash_attn_interface needs PyTorch 2.4 or later: pip install 'kgen[torch]' (or install torch "
                      "for your CUDA from pytorch.org)") from error

from . import torch as _kgen  # its functions are looked up at each call (tests replace them)

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
           "_flash_attn_forward", "_flash_attn_backward"]


def _unserved(**arguments) -> None:
    """NotImplementedError naming the first of `arguments` (name: why) that is given."""
    for name, (value, why) in arguments.items():
        if value is not None:
            raise NotImplementedError(f"{name}: {why}")


def _no_dropout(dropout_p) -> None:
    if dropout_p:
        raise NotImplementedError(f"dropout_p={dropout_p}: kgen's attention has no dropout (pass 0.0)")


def _last_dim_contiguous(t):
    return t.contiguous() if t is not None and t.stride(-1) != 1 else t


def _window(window_size, causal: bool, n_k: int) -> tuple[int, int] | None:
    """kgen's window= (beside causal=causal) for FlashAttention's window_size over n_k keys, as
    FlashAttention's kernels apply it: a side of n_k or more is open, causal closes the right side
    at the diagonal, and a bounded left side with an open right one reaches n_k keys past the
    diagonal. None = no window."""
    left, right = (int(w) for w in window_size)
    left = left if 0 <= left < n_k else -1
    right = -1 if causal or not 0 <= right < n_k else right
    if left >= 0 and right < 0 and not causal:
        right = n_k
    return None if left < 0 and right < 0 else (left, right)


def _score_mod(softcap: float, slopes, diag: str) -> tuple[str, dict, dict]:
    """(score_mod, scalars, tensors) of FlashAttention's score: softcap·tanh(s / softcap), then
    minus slope·|q + diag - k|, with slopes (h_q,) or (b, h_q) as the tensor `slope`."""
    text = "cap*tanh(score/cap)" if softcap > 0 else "score"
    scalars = {"cap": float(softcap)} if softcap > 0 else {}
    if slopes is None:
        return text, scalars, {}
    index = "[b][h]" if slopes.dim() == 2 else "[h]"
    return f"{text}-slope{index}*float(abs(q+{diag}-k))", scalars, {"slope": slopes.detach()}


def _variant(causal: bool, window_size, softcap: float, alibi_slopes, n_k: int) -> dict:
    """kgen.torch's variant keywords for FlashAttention's window_size, softcap and alibi_slopes
    over n_k keys ({} = plain attention)."""
    keywords = {}
    window = _window(window_size, causal, n_k)
    if window is not None:
        keywords["window"] = window
    if alibi_slopes is None or (alibi_slopes.dim() == 1 and not softcap > 0):
        if softcap > 0:
            keywords["softcap"] = softcap
        if alibi_slopes is not None:
            keywords["alibi_slopes"] = alibi_slopes.detach()  # FlashAttention's slopes get no gradient
        return keywords
    # kgen's presets give softcap(alibi(s)) with one slope per head; FlashAttention caps, then adds the bias
    score_mod, scalars, tensors = _score_mod(softcap, alibi_slopes, "(n_k-n_q)")
    return {**keywords, "score_mod": score_mod, "scalars": scalars, "tensors": tensors}


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


# --- dense batches ------------------------------------------------------------------------------------

def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """FlashAttention's attention on kgen.torch.attention: q (b, n_q, h, d), k and v (b, n_k, h_kv,
    d) -> out (b, n_q, h, d), v's head dim may be below q's (FlashAttention 3's hdim 192/128: out
    then (b, n_q, h, d_v)), differentiable in q, k, v (alibi_slopes get no gradient);
    return_attn_probs=True gives (out, softmax_lse (b, h, n_q) fp32, None). With gradients
    required, return_attn_probs runs the forward twice (kgen.torch.attention returns no lse)."""
    _no_dropout(dropout_p)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    variant = _variant(causal, window_size, softcap, alibi_slopes, k.shape[1])
    if return_attn_probs and not _needs_grad(q, k, v):
        out, lse = _kgen.attention_forward(q, k, v, causal=causal, scale=softmax_scale, layout="bnhd",
                                           return_lse=True, **variant)
        return out, lse, None
    out = _kgen.attention(q, k, v, causal=causal, scale=softmax_scale, layout="bnhd", deterministic=deterministic,
                          **variant)
    if not return_attn_probs:
        return out
    with torch.no_grad():
        lse = _kgen.attention_forward(q, k, v, causal=causal, scale=softmax_scale, layout="bnhd", return_lse=True,
                                      **variant)[1]
    return out, lse, None


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func on qkv (b, n, 3, h, d), read through views."""
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func on q and kv (b, n_k, 2, h_kv, d), read through views."""
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


# --- the forward and backward that ring attention calls ---------------------------------------------------

def _flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap,
                        alibi_slopes, return_softmax):
    """(out, softmax_lse, S_dmask, rng_state) as flash-attn 2.7+: out (b, n_q, h, d) and
    softmax_lse (b, h, n_q) fp32 by kgen's forward (no autograd), S_dmask None, rng_state a
    (2,) int64 tensor (no dropout: nothing to replay)."""
    _no_dropout(dropout_p)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    variant = _variant(causal, (window_size_left, window_size_right), softcap, alibi_slopes, k.shape[1])
    out, lse = _kgen.attention_forward(q, k, v, causal=causal, scale=softmax_scale, layout="bnhd", return_lse=True,
                                       **variant)
    return out, lse, None, torch.zeros(2, dtype=torch.int64, device=q.device)


def _variant_backward(q, k, v, out, lse, dout, scale, causal: bool, deterministic: bool, variant: dict):
    """(dq, dk, dv) of kgen's variant backward, through the operator (kgen.torch.attention_backward
    takes no variant keywords)."""
    fields = _kgen._variant(**variant)
    return torch.ops.kgen.attention_backward_variant(q, k, v, out, lse, dout, scale, causal, "bnhd", deterministic,
                                                     None, None, *fields)[:3]


def _flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal,
                         window_size_left, window_size_right, softcap, alibi_slopes, deterministic, rng_state=None):
    """Writes dq, dk, dv (allocated when None) in place, as flash-attn 2.7+, from the given out and
    softmax_lse (b, h, n_q) fp32: a merged (ring) lse and out give the gradients of the whole.
    Returns softmax_d, rowsum(dout·out) in fp32, (b, h, n_q) (FlashAttention pads n_q to a
    multiple of 128). rng_state is ignored."""
    _no_dropout(dropout_p)
    dout, q, k, v, out = (_last_dim_contiguous(t) for t in (dout, q, k, v, out))
    lse = _last_dim_contiguous(softmax_lse)
    dq = torch.empty_like(q) if dq is None else dq
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    variant = _variant(causal, (window_size_left, window_size_right), softcap, alibi_slopes, k.shape[1])
    if variant:
        for given, computed in zip((dq, dk, dv),
                                   _variant_backward(q, k, v, out, lse, dout, softmax_scale, causal, deterministic,
                                                     variant)):
            given.copy_(computed)
    else:
        _kgen.attention_backward(q, k, v, out, lse, dout, causal=causal, scale=softmax_scale, layout="bnhd",
                                 deterministic=deterministic, dq=dq, dk=dk, dv=dv)
    return torch.einsum("bnhd,bnhd->bhn", dout.float(), out.float())


# --- packed (varlen) batches ----------------------------------------------------------------------------

_TAKES: dict = {}


def _takes(function, name: str) -> bool:
    """Whether `function` takes the keyword `name` (listed, or a **keywords; cached per function)."""
    key = (function, name)
    if key not in _TAKES:
        parameters = inspect.signature(function).parameters
        _TAKES[key] = name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return _TAKES[key]


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """FlashAttention's packed batches on kgen.torch.varlen_attention: q (total_q, h, d), k and v
    (total_k, h_kv, d), cu_seqlens_q/k int32 (b + 1,) -> out (total_q, h, d), or (out,
    softmax_lse (h, total_q) fp32, None) with return_attn_probs. Causal, windows and ALiBi are
    bottom-right within each sequence (window sides are normalised against max_seqlen_k, as
    FlashAttention does)."""
    _no_dropout(dropout_p)
    _unserved(block_table=(block_table, "paged KV caches are not served by kgen"))
    varlen = getattr(_kgen, "varlen_attention", None)
    if varlen is None:
        raise NotImplementedError("cu_seqlens_q: packed (varlen) batches need kgen.torch.varlen_attention, "
                                  "which this kgen does not have")
    keywords = _variant(causal, window_size, softcap, alibi_slopes, max_seqlen_k)
    for key in keywords:
        if not _takes(varlen, key):
            argument = {"window": "window_size", "softcap": "softcap"}.get(key, "alibi_slopes")
            raise NotImplementedError(f"{argument}: kgen.torch.varlen_attention takes no {key}=")
    if deterministic:
        if not _takes(varlen, "deterministic"):
            raise NotImplementedError("deterministic: kgen.torch.varlen_attention has no deterministic backward")
        keywords["deterministic"] = True
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    result = varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                    scale=softmax_scale, return_lse=bool(return_attn_probs), **keywords)
    return (*result, None) if return_attn_probs else result


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_func on qkv (total, 3, h, d), read through views."""
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale,
                                  causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_varlen_func on q and kv (total_k, 2, h_kv, d), read through views."""
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


# --- KV caches ------------------------------------------------------------------------------------------

def _starts(cache_seqlens, batch: int, full: int, device) -> torch.Tensor:
    """Each sequence's cache length as int32 (b,): cache_seqlens as a tensor, an int, or None (`full`)."""
    if cache_seqlens is None or isinstance(cache_seqlens, int):
        return torch.full((batch,), full if cache_seqlens is None else cache_seqlens, dtype=torch.int32, device=device)
    return cache_seqlens.to(torch.int32)


def _append_new(q, k_cache, v_cache, k, v, starts, block_table, rotary_cos, rotary_sin, rotary_interleaved,
                causal: bool, window_size):
    """k and v written into the caches at `starts` by kgen's append kernel (through block_table, or
    rows 0..b-1 of contiguous caches), rotated with the tables if given; returns q, rotated into a
    new tensor when the tables are given (at starts + i for causal or windowed calls, else at starts)."""
    if rotary_cos is None:
        _kgen.paged_append(k, v, k_cache, v_cache, block_table, starts)
        return q
    q_rot = torch.empty_like(q)
    local = tuple(window_size) != (-1, -1)
    _kgen.paged_append(k, v, k_cache, v_cache, block_table, starts, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                       rotary_interleaved=rotary_interleaved, q=q, q_out=q_rot, q_sequential=causal or local)
    return q_rot


def _paged_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_leftpad, block_table,
                   softmax_scale, causal, window_size, softcap, rotary_interleaved, alibi_slopes, return_softmax_lse):
    """flash_attn_with_kvcache over paged caches (num_pages, page_size, h_kv, d) named by block_table
    (b, max_pages): k and v appended into their pages at cache_seqlens (rotated with the tables),
    then kgen.torch.paged_attention over each sequence's cache_seqlens + n_new keys."""
    _unserved(cache_leftpad=(cache_leftpad, "left padding is not served with a paged cache"))
    batch, page = q.shape[0], k_cache.shape[1]
    n_keys = block_table.shape[1] * page
    block_table = block_table.to(torch.int32)
    start = _starts(cache_seqlens, batch, n_keys, q.device)
    n_new = 0
    if k is not None:
        n_new = k.shape[1]
        q = _append_new(_last_dim_contiguous(q), k_cache, v_cache, _last_dim_contiguous(k), _last_dim_contiguous(v),
                        start, block_table, rotary_cos, rotary_sin, rotary_interleaved, causal, window_size)
    lens = (start + n_new).to(torch.int32)
    variant = _variant(causal, window_size, softcap, alibi_slopes, n_keys)
    return _kgen.paged_attention(_last_dim_contiguous(q), k_cache, v_cache, block_table, lens,
                                 causal=causal, scale=softmax_scale, return_lse=bool(return_softmax_lse), **variant)


def _cache_variant(causal: bool, window, softcap: float, alibi_slopes, lens, leftpad) -> dict:
    """kgen.torch's keywords for a cache whose sequence i holds keys [leftpad[i], lens[i]) (int32
    tensors): FlashAttention's masks and bias aligned to each sequence's own length."""
    diag = "lens[b]-n_q"
    mask = ["k<lens[b]"]
    tensors = {"lens": lens}
    scalars = {}
    if leftpad is not None:
        mask.append("k>=pad[b]")
        tensors["pad"] = leftpad.to(torch.int32)
    if causal:
        mask.append(f"k<=q+{diag}")
    if window is not None and window[0] >= 0:
        mask.append(f"k>=q+{diag}-wl")
        scalars["wl"] = window[0]
    if window is not None and window[1] >= 0:
        mask.append(f"k<=q+{diag}+wr")
        scalars["wr"] = window[1]
    keywords = {"mask_mod": "&&".join(mask), "scalars": scalars, "tensors": tensors}
    if softcap > 0 or alibi_slopes is not None:
        score_mod, score_scalars, score_tensors = _score_mod(softcap, alibi_slopes, diag)
        keywords.update(score_mod=score_mod, scalars={**scalars, **score_scalars}, tensors={**tensors, **score_tensors})
    return keywords


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """FlashAttention's decode step over contiguous caches (b_cache >= b, n_cache, h_kv, d): k and
    v (b, n_new, h_kv, d), when given, are written into k_cache and v_cache in place at positions
    cache_seqlens[i]...; then q (b, n_q, h, d) attends to keys [cache_leftpad[i], cache_seqlens[i]
    + n_new) of cache row i, causal and windows aligned to that length. Returns out (b, n_q, h, d),
    or (out, softmax_lse (b, h, n_q) fp32). k and v are written by kgen's append kernel, which also
    applies the rotary embedding (rotary_cos and rotary_sin (n_cache or max_pages · page_size, or
    more, rotary_dim / 2), q's dtype or fp32; rotary_interleaved True: GPT-J pairs, False:
    GPT-NeoX halves) to the new keys at cache_seqlens + i and to q (into a new tensor) at
    cache_seqlens + i for causal or windowed calls, else at cache_seqlens. cache_seqlens an int
    (or None: the whole cache) runs kgen's plain kernels on the valid prefix; a tensor of lengths
    runs a mask expression over the whole cache. num_splits is a hint kgen does not need; no
    gradients."""
    _unserved(cache_batch_idx=(cache_batch_idx, "kgen attends to cache rows 0..b-1 (gather the rows first)"))
    if (k is None) != (v is None):
        raise ValueError("k and v: pass both new keys and new values, or neither")
    if k is not None and cache_seqlens is None:
        raise ValueError("cache_seqlens: appending k and v needs the cache lengths")
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin: pass both tables, or neither")
    if rotary_cos is not None and k is None:
        raise ValueError("rotary_cos: the rotary embedding applies to new keys k and v, which are missing")
    if block_table is not None:
        return _paged_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_leftpad,
                              block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved,
                              alibi_slopes, return_softmax_lse)
    batch, n_cache = q.shape[0], k_cache.shape[1]
    keys, values = k_cache[:batch], v_cache[:batch]
    n_new = 0
    q = _last_dim_contiguous(q)
    if k is not None:
        n_new = k.shape[1]
        q = _append_new(q, k_cache, v_cache, _last_dim_contiguous(k), _last_dim_contiguous(v),
                        _starts(cache_seqlens, batch, n_cache, q.device), None, rotary_cos, rotary_sin,
                        rotary_interleaved, causal, window_size)
    options = dict(scale=softmax_scale, layout="bnhd", return_lse=bool(return_softmax_lse))
    if cache_seqlens is None or isinstance(cache_seqlens, int):
        length = n_cache if cache_seqlens is None else cache_seqlens + n_new
        if cache_leftpad is None and length > 0:  # one length: kgen's plain kernels on the valid prefix
            variant = _variant(causal, window_size, softcap, alibi_slopes, n_cache)
            return _kgen.attention_forward(q, keys[:, :length], values[:, :length], causal=causal, **options,
                                           **variant)
        lens = torch.full((batch,), length, dtype=torch.int32, device=q.device)
    else:
        lens = (cache_seqlens + n_new).to(torch.int32)
    variant = _cache_variant(causal, _window(window_size, causal, n_cache), softcap, alibi_slopes, lens, cache_leftpad)
    return _kgen.attention_forward(q, keys, values, causal=False, **options, **variant)
