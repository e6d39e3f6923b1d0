#!/usr/bin/env python3
"""MLA head dims (q·k over d_qk = 192 columns, v and o over d_v = 128): kgen side by side with its peers.

A row is one causal training/prefill step of DeepSeek-style multi-head latent attention (docs/
attention.md, "MLA head dims"): b = tokens / n sequences of n tokens, h heads, bf16, layout (b, n,
h, d). Implementations: "kgen" (kgen.torch.attention, which serves d_v < d_qk with autograd),
"cudnn", "efficient" and "flash" (SDPA restricted to that backend; a backend that refuses the
head dims shows "–"), "flex" (FlexAttention under torch.compile, causal block mask) and "fa4"
(flash_attn.cute's flash_attn_func, where ../shared/tools/fa4 installed it). Every output is
checked against an fp32 reference on the first sequence before it is timed, and in "fwdbwd" its
dq, dk and dv too (FAIL: no time).
Modes: "fwd" (the forward) and "fwdbwd" (forward and backward of all three inputs). Times are
medians in ms over interleaved rounds (bench/rounds.py); TFLOPS count the causal work exactly:
2·T·(d_qk + d_v) forward and 2·T·(4·d_qk + 3·d_v) forward plus backward, T = b·h·n(n+1)/2;
"vs" columns are the peer's time over kgen's (> 1: kgen is faster).

    python3 bench/compare_mla.py                                  # n 1k..8k, 16k tokens, h = 16
    python3 bench/compare_mla.py --seqlens 4k --mode fwd --impls kgen,cudnn,flex --out r.md
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kgen.torch  # noqa: E402
from compare_variants import time_round  # noqa: E402
from rounds import add_round_args, interleaved, size, write_table  # noqa: E402

REL_L2_BOUND = 2e-2
IMPLS = ("kgen", "cudnn", "efficient", "flash", "flex", "fa4")


def sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend  # noqa: PLC0415
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "flash": SDPBackend.FLASH_ATTENTION}[name]


def forwards(impls, scale):
    """{name: f(q, k, v) -> o}, all in (b, n, h, d) layout."""
    out = {}
    if "kgen" in impls:
        out["kgen"] = lambda q, k, v: kgen.torch.attention(q, k, v, causal=True, scale=scale, layout="bnhd")
    for name in ("cudnn", "efficient", "flash"):
        if name in impls:
            def run(q, k, v, backend=sdpa_backend(name)):
                from torch.nn.attention import sdpa_kernel  # noqa: PLC0415
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True,
                                                       scale=scale)
                return o.transpose(1, 2)
            out[name] = run
    if "flex" in impls:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: PLC0415
        flex = torch.compile(flex_attention)
        masks = {}

        def flex_run(q, k, v):
            n = q.shape[1]
            if n not in masks:
                masks[n] = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, n, n, device=q.device)
            o = flex(*(t.transpose(1, 2) for t in (q, k, v)), block_mask=masks[n], scale=scale)
            return o.transpose(1, 2)
        out["flex"] = flex_run
    if "fa4" in impls:
        try:
            from flash_attn.cute import flash_attn_func  # noqa: PLC0415
        except Exception:  # noqa: BLE001 - not on this machine
            flash_attn_func = None
        if flash_attn_func is not None:
            def fa4_run(q, k, v):
                o = flash_attn_func(q, k, v, causal=True, softmax_scale=scale)
                return o[0] if isinstance(o, tuple) else o
            out["fa4"] = fa4_run
    return out


def reference(q, k, v, grad, scale):
    """fp32 o of the first sequence, (n, h, d_v), and its dq, dk, dv for `grad`, (n, h, d) each."""
    qs, ks, vs = (t[0].float().transpose(0, 1).requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)
    grads = torch.autograd.grad(o, (qs, ks, vs), grad[0].float().transpose(0, 1))
    return o.detach().transpose(0, 1), [g.transpose(0, 1) for g in grads]


def rel_l2(got, want) -> float:
    return float((got.float() - want).norm() / want.norm())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlens", default="1k,2k,4k,8k", help="n per sequence, comma-separated")
    ap.add_argument("--tokens", default="16k", help="b·n per row (b = tokens / n, at least 1)")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dims", default="192:128", help="d_qk:d_v pairs, comma-separated")
    ap.add_argument("--mode", default="fwd,fwdbwd", help="fwd and/or fwdbwd")
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    add_round_args(ap, reps=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    impls = [i for i in args.impls.split(",") if i]
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown:
        ap.error(f"--impls: unknown {','.join(unknown)} (known: {','.join(IMPLS)})")
    torch.manual_seed(args.seed)
    peers = [i for i in impls if i != "kgen"]
    lines = ["| n | b | h | d_qk/d_v | mode | " + " | ".join(f"{i} ms" for i in impls) + " | kgen TFLOPS | " +
             " | ".join(f"vs {i}" for i in peers) + " |",
             "|" + "---|" * (6 + len(impls) + len(peers))]
    tokens = size(args.tokens)
    for pair in args.head_dims.split(","):
        d_qk, d_v = map(int, pair.split(":"))
        scale = d_qk ** -0.5
        runs = forwards(impls, scale)
        for n in map(size, args.seqlens.split(",")):
            b, h = max(1, tokens // n), args.heads
            q, k = (torch.randn(b, n, h, d_qk, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            v = torch.randn(b, n, h, d_v, device="cuda", dtype=torch.bfloat16)
            grad = torch.randn(b, n, h, d_v, device="cuda", dtype=torch.bfloat16)
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            ref, ref_grads = reference(q, k, v, grad, scale)
            status = {}
            for name, f in runs.items():
                try:
                    err = rel_l2(f(q, k, v)[0], ref)
                    status[name] = "ok" if err <= REL_L2_BOUND else f"FAIL {err:.1e}"
                except Exception as e:  # noqa: BLE001 - a peer that does not serve the head dims
                    status[name] = "–"
                    print(f"{name} (n={n}, {d_qk}/{d_v}): {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            pairs = b * h * n * (n + 1) / 2
            for mode in args.mode.split(","):
                if mode not in ("fwd", "fwdbwd"):
                    ap.error(f"--mode: {mode!r} is not fwd or fwdbwd")

                def step(f):
                    if mode == "fwd":
                        return lambda: f(q, k, v)

                    def run():
                        torch.autograd.grad(f(*leaves), leaves, grad)
                    return run
                timed, cell = {}, {}
                for name, f in runs.items():
                    if status[name] != "ok":
                        continue
                    if mode == "fwdbwd":
                        try:
                            grads = torch.autograd.grad(f(*leaves), leaves, grad)
                        except Exception as e:  # noqa: BLE001 - a forward-only peer
                            cell[name] = "–"
                            print(f"{name} backward (n={n}): {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                            continue
                        err = max(rel_l2(g[0], r) for g, r in zip(grads, ref_grads))
                        if err > REL_L2_BOUND:
                            cell[name] = f"FAIL {err:.1e}"
                            continue
                    timed[name] = step(f)
                times = interleaved(timed, time_round, args.reps, args.warmup, args.rounds)
                for name in impls:
                    cell.setdefault(name, f"{times[name][0]:.3f}" if name in times else status.get(name, "–"))
                kgen_ms = times.get("kgen", (math.nan,))[0]
                flops = 2 * pairs * ((d_qk + d_v) if mode == "fwd" else (4 * d_qk + 3 * d_v))
                ratios = [f"{times[i][0] / kgen_ms:.2f}" if i in times else "–" for i in peers]
                lines.append(f"| {n} | {b} | {h} | {d_qk}/{d_v} | {mode} | " + " | ".join(cell[i] for i in impls) +
                             f" | {flops / (kgen_ms * 1e-3) / 1e12:.0f} | " + " | ".join(ratios) + " |")
                print(lines[-1], flush=True)
            del q, k, v, grad, leaves
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
