"""References and output metrics for checking kgen (and its peers) the way kgen's correctness rules
require (docs/attention.md §5): rel_l2, cosine, max_abs and a count of out-of-tolerance elements on
outputs that were poisoned before the run, against an upcast math reference. Needs PyTorch.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass

import torch

from . import torch as kgen_torch

# rel_l2 bound on o per input dtype (docs/attention.md §5.2); lse is fp32 math in every path.
REL_L2_BOUND = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
LSE_REL_L2_BOUND = 1e-4
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}
COS_BOUND = 0.999


@contextlib.contextmanager
def _full_fp32_matmul():
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no tf32 in a reference
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def attention_reference(q, k, v, *, causal=False, scale=None, dtype=torch.float64,
                        chunk_bytes=1 << 28):
    """(o, lse) of attention on logical (b, h, n, d) tensors, computed in `dtype` on their
    device, query rows in chunks so that memory stays O(rows·n_k). Fully masked rows (causal,
    n_q > n_k) give o = 0 and lse = -inf. Same conventions as kgen_attention_forward."""
    b, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    q = q.to(dtype)
    k = k.to(dtype).repeat_interleave(h_q // h_kv, dim=1)
    v = v.to(dtype).repeat_interleave(h_q // h_kv, dim=1)
    o = q.new_empty(b, h_q, n_q, v.shape[-1])
    lse = q.new_empty(b, h_q, n_q)
    rows = max(1, chunk_bytes // max(1, b * h_q * n_k * q.element_size()))
    keys = torch.arange(n_k, device=q.device)
    with _full_fp32_matmul():
        for i in range(0, n_q, rows):
            j = min(i + rows, n_q)
            s = (q[:, :, i:j] @ k.transpose(-1, -2)) * scale
            if causal:
                last = torch.arange(i, j, device=q.device)[:, None] + (n_k - n_q)
                s.masked_fill_(keys[None, :] > last, -math.inf)
            m = s.amax(-1, keepdim=True)
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # fully masked row
            p = torch.exp(s - m)
            l = p.sum(-1, keepdim=True)
            o[:, :, i:j] = (p @ v) / torch.where(l == 0, torch.ones_like(l), l)
            lse[:, :, i:j] = (m + torch.log(l)).squeeze(-1)
    return o, lse


def attention_math(q, k, v, *, causal=False, scale=None):
    """Differentiable attention on logical (b, h, n, d) tensors in their dtype and device (the
    math path): the reference for first- and second-order gradients. Fully masked rows give 0."""
    b, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    k = k.repeat_interleave(h_q // h_kv, dim=1)
    v = v.repeat_interleave(h_q // h_kv, dim=1)
    with _full_fp32_matmul():
        s = (q @ k.transpose(-1, -2)) * scale
        if causal:
            keys = torch.arange(n_k, device=q.device)
            last = torch.arange(n_q, device=q.device)[:, None] + (n_k - n_q)
            masked = keys[None, :] > last
            s = s.masked_fill(masked, -math.inf)
        m = s.detach().amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # softmax does not depend on m
        p = torch.exp(s - m)
        l = p.sum(-1, keepdim=True)
        p = p / torch.where(l == 0, torch.ones_like(l), l)
        return p @ v


@dataclass
class Check:
    """Metrics of one output against its reference; `ok` is the docs/attention.md §5.2 pass rule."""
    name: str
    ok: bool
    rel_l2: float
    cos: float
    max_abs: float
    n_bad: int  # elements with |out - ref| > atol + rtol·|ref| (reported, not a pass rule)
    numel: int
    reason: str = ""

    def __str__(self):
        verdict = "ok  " if self.ok else "FAIL"
        text = (f"{verdict} {self.name}: rel_l2 {self.rel_l2:.2e} cos {self.cos:.6f} "
                f"max_abs {self.max_abs:.2e} bad {self.n_bad}/{self.numel}")
        return text + (f" ({self.reason})" if self.reason else "")

    def as_dict(self):
        return asdict(self)


def compare(name, out, ref, *, bound, atol=0.0, rtol=0.0, cos_bound=COS_BOUND) -> Check:
    """Check `out` against `ref` (any dtypes, same shape). Non-finite reference entries (lse of
    fully masked rows) must be matched exactly; every other output entry must be finite."""
    out = out.detach().to(torch.float64)
    ref = ref.detach().to(device=out.device, dtype=torch.float64)
    if out.shape != ref.shape:
        return Check(name, False, math.nan, math.nan, math.nan, out.numel(), out.numel(),
                     f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    finite = torch.isfinite(ref)
    reasons = []
    n_mismatch = int((out[~finite] != ref[~finite]).sum())
    if n_mismatch:
        reasons.append(f"{n_mismatch} entries should be {ref[~finite][0].item()}")
    o, r = out[finite], ref[finite]
    nonfinite = ~torch.isfinite(o)
    if n_nonfinite := int(nonfinite.sum()):
        reasons.append(f"{n_nonfinite} NaN/Inf")
    o = torch.where(nonfinite, torch.zeros_like(o), o)
    diff = o - r
    norm_o, norm_r, norm_d = (float(torch.linalg.vector_norm(x)) for x in (o, r, diff))
    if norm_r > 0:
        rel_l2 = norm_d / norm_r
        cos = float((o * r).sum()) / (norm_o * norm_r) if norm_o > 0 else 0.0
    elif norm_o == 0:
        rel_l2, cos = 0.0, 1.0  # both zero (e.g. every row masked)
    else:
        rel_l2, cos = math.inf, 0.0
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    n_bad = int((nonfinite | (diff.abs() > atol + rtol * r.abs())).sum()) + n_mismatch
    if norm_r > 0 and norm_o == 0 and not n_nonfinite:
        reasons.append("output is all zero")
    if not rel_l2 <= bound:
        reasons.append(f"rel_l2 > {bound:g}")
    if not cos > cos_bound:
        reasons.append(f"cos <= {cos_bound}")
    return Check(name, not reasons, rel_l2, cos, max_abs, n_bad, out.numel(), "; ".join(reasons))


def check_attention(o, lse, o_ref, lse_ref, dtype) -> list[Check]:
    """Checks of kgen's o (and lse unless None) against a reference, with `dtype`'s bounds."""
    atol, rtol = TOLERANCE[dtype]
    checks = [compare("o", o, o_ref, bound=REL_L2_BOUND[dtype], atol=atol, rtol=rtol)]
    if lse is not None:
        checks.append(compare("lse", lse, lse_ref, bound=LSE_REL_L2_BOUND, atol=1e-4, rtol=1e-4))
    return checks


# --- LRPE-cosine: the PyTorch formulation (docs/lrpe.md) ----------------------------------------

def _lrpe_act(x, act):
    """act(x) on logical (b, h, n, d); act is none/relu/sigmoid/silu/softmax/softmax_seq."""
    if act == "none":
        return x
    if act == "relu":
        return torch.relu(x)
    if act == "sigmoid":
        return torch.sigmoid(x)
    if act == "silu":
        return torch.nn.functional.silu(x)
    if act == "softmax":
        return torch.softmax(x, dim=-1)
    if act == "softmax_seq":
        return torch.softmax(x, dim=-2)
    raise ValueError(act)


def lrpe_angles(theta, n, d, *, offset=0, shape=None, l=0, dtype=torch.float64):
    """Θ as (h or 1, n, d): (offset + s)·θ[h, k] (1-d) or, with a grid `shape`, the coordinate of
    token s - l along dim k // e times θ[h, k % e] (0 for the l extra tokens)."""
    theta = theta.to(dtype)
    if theta.dim() == 1:
        theta = theta[None]
    device = theta.device
    if shape is None:
        pos = torch.arange(n, device=device, dtype=dtype) + offset
        return pos[None, :, None] * theta.expand(theta.shape[0], d)[:, None, :]
    e = theta.shape[-1]
    r = torch.arange(n - l, device=device)
    coords = []
    for size in reversed(shape):  # the last dim fastest
        coords.append(r % size)
        r = r // size
    coords = torch.stack(coords[::-1], dim=-1).to(dtype)  # (n - l, m)
    k = torch.arange(d, device=device)
    pos = coords[:, k // e]  # (n - l, d)
    freq = theta[:, k % e]  # (h, d)
    angles = pos[None] * freq[:, None, :]
    return torch.cat([angles.new_zeros(angles.shape[0], l, d), angles], dim=1)


def lrpe_reference(x, theta, *, act="none", offset=0, shape=None, l=0, dtype=torch.float64):
    """o = [act(x)·cos Θ, act(x)·sin Θ] for logical (b, h, n, d) x, computed in `dtype`."""
    xb = _lrpe_act(x.to(dtype), act)
    a = lrpe_angles(theta, x.shape[-2], x.shape[-1], offset=offset, shape=shape, l=l, dtype=dtype)
    return torch.cat([xb * torch.cos(a), xb * torch.sin(a)], dim=-1)


def check_lrpe(out, ref, dtype, name="o") -> Check:
    atol, rtol = TOLERANCE[dtype]
    return compare(name, out, ref, bound=REL_L2_BOUND[dtype], atol=atol, rtol=rtol)


# --- a model on kgen's operators, for torch.compile checks --------------------------------------------

class AttentionBlock(torch.nn.Module):
    """x (b, n, d_model) -> (b, n, d_model): a qkv projection, LRPE-cosine (silu) on q and k,
    causal attention in the bnhd layout on kgen's kernels and an output projection."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(2 * d_model, d_model)
        self.register_buffer("theta", 10000.0 ** (-torch.arange(self.head_dim) / self.head_dim))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).unbind(2)
        q = kgen_torch.lrpe_cosine(q, self.theta, layout="bnhd", act="silu")
        k = kgen_torch.lrpe_cosine(k, self.theta, layout="bnhd", act="silu")
        o = kgen_torch.attention(q, k, torch.cat([v, v], dim=-1), causal=True, layout="bnhd")
        return self.out(o.reshape(b, n, -1))


def rotary_reference(x, cos, sin, positions, *, interleaved=False, dtype=torch.float64):
    """x (b, n, h, d) with its first rotary_dim = 2·cos.shape[1] features rotated at `positions`
    ((b, n) integers; rows of cos and sin), FlashAttention's convention: interleaved=False rotates
    GPT-NeoX halves (i with i + rotary_dim/2), True GPT-J pairs (2i with 2i + 1). In `dtype`."""
    half = cos.shape[1]
    c = cos.to(dtype)[positions.long()][:, :, None, :]
    s = sin.to(dtype)[positions.long()][:, :, None, :]
    x = x.to(dtype)
    r, rest = x[..., :2 * half], x[..., 2 * half:]
    if interleaved:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    else:
        x1, x2 = r[..., :half], r[..., half:]
        rotated = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    return torch.cat((rotated, rest), dim=-1)


def paged_append_reference(k, v, k_cache, v_cache, block_table, cache_seqlens, *, rotary_cos=None, rotary_sin=None,
                           rotary_interleaved=False, q=None, q_sequential=True):
    """What kgen.torch.paged_append writes, in plain PyTorch (layout bnhd), in place: row i of batch
    b of k and v at position cache_seqlens[b] + i of the caches (through block_table, or cache row
    b of contiguous caches; positions past the table are dropped), k rotated (rounded once to the
    cache's dtype) when the tables are given. Returns q rotated (in q's dtype), or None."""
    b, n = k.shape[:2]
    lens = cache_seqlens.long().to(k_cache.device)
    pos = lens[:, None] + torch.arange(n, device=k_cache.device)
    page = k_cache.shape[1]
    limit = page if block_table is None else block_table.shape[1] * page
    if rotary_cos is not None:
        k = rotary_reference(k, rotary_cos, rotary_sin, pos, interleaved=rotary_interleaved)
    keep = (pos >= 0) & (pos < limit)
    if block_table is None:
        rows = torch.arange(b, device=k_cache.device)[:, None].expand(b, n)
        where = (rows[keep], pos[keep])
    else:
        slots = torch.div(pos.clamp(0, limit - 1), page, rounding_mode="floor")
        pages = block_table.long().gather(1, slots)
        where = (pages[keep], (pos % page)[keep])
    k_cache[where] = k[keep].to(k_cache.dtype)
    v_cache[where] = v[keep].to(v_cache.dtype)
    if q is None or rotary_cos is None:
        return None
    n_q = q.shape[1]
    q_pos = lens[:, None] + (torch.arange(n_q, device=q.device) if q_sequential else torch.zeros(n_q, dtype=torch.long,
                                                                                                  device=q.device))
    return rotary_reference(q, rotary_cos, rotary_sin, q_pos, interleaved=rotary_interleaved).to(q.dtype)
