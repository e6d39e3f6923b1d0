#!/usr/bin/env python3
"""kgen's attention variants side by side with FlashAttention-4, FlexAttention and cuDNN (SDPA).

Cells (docs/attention.md §8): a causal sliding window of 1k and 4k keys, softcap 50, ALiBi, a
document mask (8 documents of random lengths), gpt-oss's window + softcap + sinks, and a relative
bias table (score + bias[h][q − k + n − 1]), all causal, bf16, b·n = 16k tokens, h·d = 2048.
Every implementation's output is checked against an fp32 reference of the same formula on two
sampled heads before it is timed; one that fails gets FAIL and no time; one that does not serve the
cell (or raises) gets "–". The implementations of a row are timed in --rounds rounds whose order
rotates (bench/rounds.py), so that a power-capped clock meets them alike.

Peers: "fa4" (flash_attn.cute.flash_attn_func: window_size, softcap, learnable_sink; the GPU
machine gets it from ../shared/tools/fa4), "flex" (flex_attention under torch.compile with its
block mask built once per cell, score_mod/mask_mod for the rest; its compile is not timed), and
"cudnn" (SDPA's cuDNN backend) on plain causal attention, the floor every variant is measured
against. Times are medians in ms; the ratio columns are the peer's time over kgen's (> 1: kgen
is faster).

With --mode fwdbwd each implementation runs the forward and the backward (torch.autograd.grad
of q, k and v against a fixed output gradient), and the check also compares the sampled heads'
dq, dk and dv with the fp32 reference's autograd gradients.

With --mode dbl each implementation runs the forward, the backward with create_graph=True and a
second grad of (dq, dk, dv) against fixed cotangents (the double backward), checked on the
sampled heads against the fp32 reference differentiated twice. The peer is "math": the same
formula in bf16 on n×n score tensors under autograd (PyTorch's math path with the modification;
FlashAttention-4, FlexAttention and cuDNN have no double backward).

    python3 bench/compare_variants.py                                  # forward, d = 64 and 128, 4k and 16k
    python3 bench/compare_variants.py --mode fwdbwd --seqlens 4k --head-dims 128 --out r.md
    python3 bench/compare_variants.py --mode dbl --impls kgen,math --seqlens 4k --head-dims 128 --tokens 4096
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kgen.torch  # noqa: E402
from rounds import interleaved, size  # noqa: E402

REL_L2_BOUND = 2e-2  # bf16 outputs against the fp32 reference (docs/attention.md §5)
SAMPLED_HEADS = 2
IMPLS = ("kgen", "fa4", "flex", "cudnn", "math")


class Cell:
    """One variant: how each implementation runs it, and its fp32 reference on one head."""

    def __init__(self, name, kgen_kw, fa4_kw=None, score=None, mask=None, sinks=False, tensors=None):
        self.name, self.kgen_kw, self.fa4_kw = name, kgen_kw, fa4_kw
        self.score, self.mask, self.sinks, self.tensors = score, mask, sinks, tensors or {}


def make_cells(b: int, h: int, n: int, device) -> list[Cell]:
    gen = torch.Generator(device=device).manual_seed(7)
    slopes = torch.tensor([2 ** (-8 * (i + 1) / h) for i in range(h)], device=device, dtype=torch.float32)
    sinks = torch.randn(h, device=device, generator=gen, dtype=torch.float32)
    bias = 0.5 * torch.randn(h, 2 * n - 1, device=device, generator=gen, dtype=torch.float32)
    cuts = torch.sort(torch.randint(1, n, (b, 7), device=device, generator=gen), dim=1).values
    docs = (torch.arange(n, device=device)[None, :, None] >= cuts[:, None, :]).sum(-1).to(torch.int32)
    causal = lambda bb, hh, q, k: q >= k  # noqa: E731
    window = lambda w: (lambda bb, hh, q, k: (q >= k) & (q - k <= w))  # noqa: E731
    return [
        Cell("causal (plain)", {}, {"causal": True}, mask=causal),
        Cell("window 1k", {"window": (1024, 0)}, {"causal": True, "window_size": (1024, 0)}, mask=window(1024)),
        Cell("window 4k", {"window": (4096, 0)}, {"causal": True, "window_size": (4096, 0)}, mask=window(4096)),
        Cell("softcap 50", {"softcap": 50.0}, {"causal": True, "softcap": 50.0},
             score=lambda s, bb, hh, q, k: 50.0 * torch.tanh(s / 50.0), mask=causal),
        Cell("alibi", {"alibi_slopes": slopes}, None,
             score=lambda s, bb, hh, q, k: s - slopes[hh] * (q - k).abs(), mask=causal),
        Cell("document (8 docs)", {"document_ids": docs}, None,
             mask=lambda bb, hh, q, k: (q >= k) & (docs[bb, q] == docs[bb, k])),
        Cell("window 1k + softcap + sinks", {"window": (1024, 0), "softcap": 50.0, "sinks": sinks},
             {"causal": True, "window_size": (1024, 0), "softcap": 50.0, "learnable_sink": sinks},
             score=lambda s, bb, hh, q, k: 50.0 * torch.tanh(s / 50.0), mask=window(1024), sinks=True,
             tensors={"sinks": sinks}),
        Cell("relative bias table", {"score_mod": f"score + bias[h][q - k + {n - 1}]", "tensors": {"bias": bias}}, None,
             score=lambda s, bb, hh, q, k: s + bias[hh, q - k + n - 1], mask=causal),
    ]


def reference_rows(cell: Cell, qh, kh, vh, bb: int, hh: int, scale: float):
    """fp32 o of one head from its (n, d) rows (b index bb, head index hh as the variant sees them)."""
    n = qh.shape[0]
    s = scale * qh @ kh.T
    idx_q = torch.arange(n, device=qh.device)[:, None]
    idx_k = torch.arange(n, device=qh.device)[None, :]
    if cell.score is not None:
        s = cell.score(s, bb, hh, idx_q, idx_k)
    visible = cell.mask(bb, hh, idx_q, idx_k) if cell.mask is not None else torch.ones_like(s, dtype=torch.bool)
    s = s.masked_fill(~visible, float("-inf"))
    if cell.sinks:
        s = torch.cat([s, cell.tensors["sinks"][hh].expand(n, 1)], dim=1)
        return torch.softmax(s, dim=1)[:, :n] @ vh
    return torch.softmax(s, dim=1) @ vh


def reference_head(cell: Cell, q, k, v, bb: int, hh: int, scale: float, d_o=None, cotangents=None):
    """fp32 o of head (bb, hh) (tensors (b, n, h, d)); with d_o, the head's [o, dq, dk, dv]; with
    cotangents of (dq, dk, dv) too, then also the second grads [q̄, k̄, v̄]."""
    rows = [t[bb, :, hh].detach().float() for t in (q, k, v)]
    if d_o is None:
        return [reference_rows(cell, *rows, bb, hh, scale)]
    with torch.enable_grad():
        rows = [r.requires_grad_() for r in rows]
        o = reference_rows(cell, *rows, bb, hh, scale)
        grads = torch.autograd.grad(o, rows, d_o[bb, :, hh].float(), create_graph=cotangents is not None)
        if cotangents is None:
            return [o.detach(), *grads]
        second = torch.autograd.grad(grads, rows, [c[bb, :, hh].float() for c in cotangents])
    return [o.detach(), *(g.detach() for g in grads), *second]


def math_attention(cell: Cell, q, k, v, scale: float):
    """The cell's formula on (b, h, n, n) score tensors in q's dtype (softmax in fp32), under
    autograd: PyTorch's math path with the modification. Tensors (b, n, h, d)."""
    b, n, h, _ = q.shape
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    s = (qt @ kt.transpose(-1, -2)) * scale
    idx = lambda size, dim: torch.arange(size, device=q.device).view([-1 if i == dim else 1 for i in range(4)])  # noqa: E731
    bb, hh, qi, ki = idx(b, 0), idx(h, 1), idx(n, 2), idx(n, 3)
    if cell.score is not None:
        s = cell.score(s, bb, hh, qi, ki)
    if cell.mask is not None:
        s = s.masked_fill(~cell.mask(bb, hh, qi, ki), float("-inf"))
    s = s.float()
    if cell.sinks:
        s = torch.cat([s, cell.tensors["sinks"].view(1, h, 1, 1).expand(b, h, n, 1)], dim=-1)
        p = torch.softmax(s, dim=-1)[..., :n]
    else:
        p = torch.softmax(s, dim=-1)
    return (p.to(q.dtype) @ vt).transpose(1, 2)


def runners(cell: Cell, q, k, v, scale: float, impls, fa4, backward: bool = False):
    """{impl: forward callable}; tensors (b, n, h, d). backward: kgen's differentiable entry."""
    out = {}
    if "kgen" in impls:
        kgen_fn = kgen.torch.attention if backward else kgen.torch.attention_forward
        out["kgen"] = lambda: kgen_fn(q, k, v, causal=True, scale=scale, layout="bnhd", **cell.kgen_kw)
    if "fa4" in impls and fa4 is not None and cell.fa4_kw is not None:
        out["fa4"] = lambda: fa4(q, k, v, softmax_scale=scale, **cell.fa4_kw)[0]
    if "flex" in impls:
        out["flex"] = flex_runner(cell, q, k, v, scale)
    if "math" in impls and backward:
        out["math"] = lambda: math_attention(cell, q, k, v, scale)
    if "cudnn" in impls and cell.name == "causal (plain)":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=True, scale=scale).transpose(1, 2)
        out["cudnn"] = cudnn
    return out


_FLEX = None


def flex_runner(cell: Cell, q, k, v, scale: float):
    global _FLEX
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if cell.sinks:
        return None  # FlexAttention has no sink term
    if _FLEX is None:
        # One compile per cell and shape: lift dynamo's recompile limits, or it falls back to eager.
        config = torch._dynamo.config
        for limit in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                      "accumulated_recompile_limit"):
            if hasattr(config, limit):
                setattr(config, limit, max(getattr(config, limit), 256))
        _FLEX = torch.compile(flex_attention, dynamic=False)
    b, n = q.shape[0], q.shape[1]
    mask = cell.mask
    block = create_block_mask(lambda bb, hh, qi, ki: mask(bb, hh, qi, ki), b, None, n, n, device=q.device)
    score = None
    if cell.score is not None:
        fn = cell.score
        score = lambda s, bb, hh, qi, ki: fn(s, bb, hh, qi, ki)  # noqa: E731
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    return lambda: _FLEX(qt, kt, vt, score_mod=score, block_mask=block, scale=scale).transpose(1, 2)


def with_backward(forward, q, k, v, d_o):
    """forward, then the gradients of q, k and v against d_o: returns [o, dq, dk, dv]."""
    def run():
        o = forward()
        return [o.detach(), *torch.autograd.grad(o, (q, k, v), d_o)]
    return run


def with_double_backward(forward, q, k, v, d_o, cotangents):
    """forward, the gradients of q, k and v against d_o with create_graph=True, then their
    gradients against `cotangents`: returns [o, dq, dk, dv, q̄, k̄, v̄]."""
    def run():
        o = forward()
        first = torch.autograd.grad(o, (q, k, v), d_o, create_graph=True)
        return [o.detach(), *(g.detach() for g in first), *torch.autograd.grad(first, (q, k, v), cotangents)]
    return run


def rel_l2(out, ref) -> float:
    return float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def time_round(run, reps, warmup):
    for _ in range(warmup):
        run()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events], 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlens", default="4k,16k", help="sequence lengths (n_q = n_k), comma-separated")
    ap.add_argument("--head-dims", default="64,128", help="head dims, comma-separated")
    ap.add_argument("--tokens", type=int, default=16384, help="b·n per row (b = tokens / n, at least 1)")
    ap.add_argument("--hidden", type=int, default=2048, help="h·d per row")
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    ap.add_argument("--cells", default="", help="substrings of the cell names to run (default: all)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="fwd", choices=("fwd", "fwdbwd", "dbl"),
                    help="fwd: the forward; fwdbwd: forward and backward (dq, dk, dv checked too); dbl: forward, "
                         "backward and double backward (second grads checked too; peer: math)")
    ap.add_argument("--out", default="", help="also write the table (markdown) here")
    args = ap.parse_args()
    impls = [i for i in args.impls.split(",") if i]
    for i in impls:
        if i not in IMPLS:
            ap.error(f"--impls: unknown implementation {i!r} (known: {', '.join(IMPLS)})")
    try:
        from flash_attn.cute import flash_attn_func as fa4
    except Exception as e:  # noqa: BLE001
        fa4 = None
        print(f"note: FlashAttention-4 unavailable ({type(e).__name__}: {e})", file=sys.stderr)
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    lines = [f"device: {props.name}; torch {torch.__version__}; bf16; causal; b·n = {args.tokens}, h·d = {args.hidden}; "
             f"{ {'fwd': 'forward', 'fwdbwd': 'forward + backward', 'dbl': 'forward + backward + double backward'}[args.mode]}",
             "", "| d | n | cell | " + " | ".join(f"{i} ms" for i in impls) + " | " +
             " | ".join(f"{i}/kgen" for i in impls if i != "kgen") + " |",
             "|" + "---|" * (3 + len(impls) + len(impls) - 1)]
    print("\n".join(lines), flush=True)
    for d in [int(x) for x in args.head_dims.split(",")]:
        for n in [size(x) for x in args.seqlens.split(",")]:
            b, h = max(1, args.tokens // n), max(1, args.hidden // d)
            gen = torch.Generator(device=device).manual_seed(n + d)
            q, k, v = (torch.randn(b, n, h, d, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(3))
            backward = args.mode != "fwd"
            d_o = torch.randn(b, n, h, d, device=device, dtype=torch.bfloat16, generator=gen) if backward else None
            cotangents = [torch.randn(b, n, h, d, device=device, dtype=torch.bfloat16, generator=gen)
                          for _ in range(3)] if args.mode == "dbl" else None
            if backward:
                q, k, v = (t.requires_grad_() for t in (q, k, v))
            scale = 1.0 / math.sqrt(d)
            for cell in make_cells(b, h, n, device):
                if args.cells and not any(c in cell.name for c in args.cells.split(",")):
                    continue
                runs, notes = {}, {}
                for name, run in runners(cell, q, k, v, scale, impls, fa4, backward).items():
                    if run is None:
                        continue
                    if cotangents is not None:
                        run = with_double_backward(run, q, k, v, d_o, cotangents)
                    elif backward:
                        run = with_backward(run, q, k, v, d_o)
                    try:
                        out = run()
                        torch.cuda.synchronize()
                        outs = list(out) if backward else [out]
                        errors = [rel_l2(got[bb, :, hh], want)
                                  for bb, hh in [(0, 0), (b - 1, h - 1)][:SAMPLED_HEADS]
                                  for got, want in zip(outs, reference_head(cell, q, k, v, bb, hh, scale, d_o,
                                                                            cotangents))]
                        if max(errors) > REL_L2_BOUND or not all(torch.isfinite(t).all() for t in outs):
                            notes[name] = f"FAIL ({max(errors):.1e})"
                            continue
                        runs[name] = run
                    except Exception as e:  # noqa: BLE001
                        notes[name] = "–"
                        print(f"note: {name} on {cell.name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                times = interleaved(runs, time_round, args.reps, args.warmup, args.rounds) if runs else {}
                cells = [f"{times[i][0]:.3f}" if i in times else notes.get(i, "–") for i in impls]
                ratios = [f"{times[i][0] / times['kgen'][0]:.2f}" if i in times and "kgen" in times else "–"
                          for i in impls if i != "kgen"]
                line = f"| {d} | {n} | {cell.name} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |"
                lines.append(line)
                print(line, flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
