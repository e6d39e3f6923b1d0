"""The attention implementations the benchmark compares, and the check each passes before timing.

Every implementation is a function (q, k, v) -> o on (batch, seq, heads, head_dim) tensors,
causal, scale 1/sqrt(head_dim):
  kgen        kgen.torch.attention(..., causal=True, layout="bnhd"): no copies in or out
  sdpa-cudnn  F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION)
  sdpa-flash  the same under SDPBackend.FLASH_ATTENTION
  sdpa-math   the same under SDPBackend.MATH (PyTorch's composite reference; any device)
  naive       softmax(q kᵀ / sqrt(d) + causal mask) v, written out in PyTorch
The SDPA and naive paths take (b, h, n, d) views (transposes, no copies) and hand back a
transposed view, as a model written for them does.

The check (`check`) runs one forward and backward of an implementation on random inputs of the
benchmark's shape, dtype and autocast setting, and compares o, dq, dk and dv with the math
formulation in float64 (float32 for large 16-bit shapes, on sampled heads), with the bounds of
kgen's own tests (kgen.testing, docs/attention.md §5).
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))  # kgen's package; it loads its library on first use
from kgen.testing import REL_L2_BOUND, TOLERANCE, attention_math, compare  # noqa: E402

IMPLS = ("kgen", "sdpa-cudnn", "sdpa-flash", "sdpa-math", "naive")
GRAD_BOUND = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}  # rel_l2 of dq, dk, dv
FULL_REFERENCE_FLOPS = 2e11  # above this, or above 4 GiB of float64 scores, the reference
FULL_REFERENCE_SCORE_BYTES = 1 << 32  # recomputes a few sampled (batch, head) slices only
SAMPLED_SLICES = 4


def autocast(device: str, dtype: torch.dtype):
    """bf16/fp16 autocast on `device`, or nothing for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=dtype)


def _same_dtype(q, k, v):
    """q, k, v in one dtype: autocast's if enabled and they differ (RoPE in fp32 would do that)."""
    if q.dtype == k.dtype == v.dtype:
        return q, k, v
    dtype = torch.get_autocast_dtype(q.device.type) if torch.is_autocast_enabled(q.device.type) else q.dtype
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _bhnd(*ts):
    return [t.transpose(1, 2) for t in ts]


def naive(q, k, v):
    q, k, v = _bhnd(q, k, v)
    n = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    mask = torch.full((n, n), -math.inf, device=q.device, dtype=scores.dtype).triu(1)
    return (torch.softmax(scores + mask, dim=-1) @ v).transpose(1, 2)


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def attend(q, k, v):
        q, k, v = _bhnd(*_same_dtype(q, k, v))
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    return attend


_kgen_attend = None


def _kgen():
    """kgen's attention, imported on first use."""
    global _kgen_attend
    if _kgen_attend is None:
        import kgen
        import kgen.torch
        if kgen.library_path() is None:
            raise RuntimeError("kgen's library was not found: build it and set KGEN_LIBRARY=.../libkgen.so "
                               "(and PYTHONPATH=python)")

        def attend(q, k, v):
            return kgen.torch.attention(*_same_dtype(q, k, v), causal=True, layout="bnhd")
        _kgen_attend = attend
    return _kgen_attend


def make(impl: str, device: str, compiled: bool = False):
    """The attention function of `impl`, or raises RuntimeError saying why it cannot run here.
    compiled: for a model under torch.compile (kgen's operators are torch.library ops, which
    dynamo traces into the graph; the argument is kept for implementations that need it)."""
    if impl == "naive":
        return naive
    if impl == "kgen":
        if device != "cuda":
            raise RuntimeError("kgen runs on CUDA devices only (skipped on this device)")
        return _kgen()
    from torch.nn.attention import SDPBackend
    backends = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION,
                "sdpa-math": SDPBackend.MATH}
    if impl not in backends:
        raise ValueError(f"unknown attention implementation {impl!r}; known: {', '.join(IMPLS)}")
    if device != "cuda" and impl != "sdpa-math":
        raise RuntimeError(f"{impl} needs a CUDA device (skipped on this device)")
    return _sdpa(backends[impl])


# --- the check -----------------------------------------------------------------------------------

@dataclass
class CheckResult:
    ok: bool
    summary: str  # worst rel_l2 over the outputs, or why it failed
    checks: list = field(default_factory=list)  # kgen.testing.Check per output
    reference: str = ""
    first_call_s: float = math.nan  # the implementation's first forward + backward on this shape

    def as_dict(self):
        return {"ok": self.ok, "summary": self.summary, "reference": self.reference,
                "first_call_s": self.first_call_s,
                "checks": [c.as_dict() for c in self.checks]}


def inputs(b, n, h, d, dtype, device, seed=0):
    """q, k, v, d_o as the model hands them over: q, k contiguous (b, n, h, d) (RoPE's output), v
    a strided view of a fused (b, n, 3, h, d) projection, d_o contiguous."""
    g = torch.Generator(device=device).manual_seed(seed)
    qkv = torch.randn(b, n, 3, h, d, generator=g, device=device, dtype=torch.float32).to(dtype)
    q, k, v = qkv.unbind(2)
    d_o = torch.randn(b, n, h, d, generator=g, device=device, dtype=torch.float32).to(dtype)
    return q.contiguous(), k.contiguous(), v, d_o


def _slices(b, h, n, d, seed):
    """(batch, head) pairs the reference recomputes; None = all of them in one go."""
    if 4 * b * h * n * n * d <= FULL_REFERENCE_FLOPS and b * h * n * n * 8 <= FULL_REFERENCE_SCORE_BYTES:
        return None
    g = torch.Generator().manual_seed(seed)
    picks = {(0, 0), (b - 1, h - 1)}
    while len(picks) < min(SAMPLED_SLICES, b * h):
        picks.add((int(torch.randint(b, (1,), generator=g)), int(torch.randint(h, (1,), generator=g))))
    return sorted(picks)


def _reference(q, k, v, d_o, ref_dtype):
    """o, dq, dk, dv of the math formulation in ref_dtype, on (b, n, h, d) tensors."""
    leaves = [t.detach().transpose(1, 2).to(ref_dtype).requires_grad_(True) for t in (q, k, v)]
    o = attention_math(*leaves, causal=True)
    grads = torch.autograd.grad(o, leaves, d_o.transpose(1, 2).to(ref_dtype))
    return [t.detach().transpose(1, 2) for t in (o, *grads)]


_reference_cache: dict = {}


def drop_reference():
    """Free the cached reference outputs (between shapes)."""
    _reference_cache.clear()


def check(attend, b, n, h, d, dtype, device, seed=0) -> CheckResult:
    """One forward and backward of `attend` under the run's autocast, against the reference."""
    q, k, v, d_o = inputs(b, n, h, d, dtype, device, seed)
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    with autocast(device, dtype):
        o = attend(*leaves)
    grads = torch.autograd.grad(o, leaves, d_o)
    sync()
    first_call_s = time.perf_counter() - start
    outs = [o.detach(), *grads]
    del o, grads
    picks = _slices(b, h, n, d, seed)
    ref_dtype = torch.float64 if picks is None or dtype == torch.float32 else torch.float32
    atol, rtol = TOLERANCE[dtype]
    names = ("o", "dq", "dk", "dv")
    bounds = (REL_L2_BOUND[dtype],) + (GRAD_BOUND[dtype],) * 3
    key = (b, n, h, d, dtype, device, seed)
    if _reference_cache.get("key") != key:  # one shape at a time: every implementation reuses it
        _reference_cache.clear()
        _reference_cache["key"] = key
    results = []
    for sel in ([(slice(None), slice(None))] if picks is None else
                [(slice(bi, bi + 1), slice(hi, hi + 1)) for bi, hi in picks]):
        idx = (sel[0], slice(None), sel[1])  # (batch, seq, head) of (b, n, h, d)
        slice_key = (sel[0].start, sel[1].start)
        if slice_key not in _reference_cache:
            _reference_cache[slice_key] = _reference(q[idx], k[idx], v[idx], d_o[idx], ref_dtype)
        refs = _reference_cache[slice_key]
        label = "" if picks is None else f"[{sel[0].start},{sel[1].start}]"
        for name, out, ref, bound in zip(names, outs, refs, bounds):
            results.append(compare(name + label, out[idx], ref, bound=bound, atol=atol, rtol=rtol))
    ok = all(c.ok for c in results)
    worst = max(results, key=lambda c: c.rel_l2 if math.isfinite(c.rel_l2) else math.inf)
    summary = f"worst rel_l2 {worst.rel_l2:.1e} ({worst.name})"
    if not ok:
        summary = "FAIL: " + "; ".join(str(c) for c in results if not c.ok)
    where = "all heads" if picks is None else f"{len(picks)} sampled (batch, head) slices"
    return CheckResult(ok, summary, results, f"{str(ref_dtype).removeprefix('torch.')} math, {where}",
                       first_call_s)
