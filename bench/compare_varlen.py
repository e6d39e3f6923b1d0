#!/usr/bin/env python3
"""kgen's packed (variable-length) attention side by side with its peers on packed training batches.

A row is one packed batch: sequences with lognormal lengths (mean --mean tokens, sigma --sigma,
default 1; 0: every length the mean) laid end to end up to --tokens tokens, causal (without a
mask: --no-causal), bf16, h·d = 2048 (docs/attention.md §9). Implementations: "kgen"
(kgen.torch.varlen_attention), "dense" (kgen's dense kernel on b = tokens / mean sequences of the
mean length: the same tokens, the time per token the packed batch is held to), "fa4"
(flash_attn.cute's varlen function, where the GPU machine has it from ../shared/tools/fa4), "flex"
(FlexAttention under torch.compile with a document (+ causal) block mask built once per row) and
"njt" (SDPA on nested jagged tensors, its fastest backend). Every implementation's output is
checked on three sampled sequences against an fp32 reference before it is timed (FAIL: no time;
"–": it does not serve the row). Times are medians in ms over interleaved rounds
(bench/rounds.py); TFLOPS count the work of the sequences (4·Σ n_i(n_i+1)/2·h·d forward when
causal, 4·Σ n_i²·h·d without a mask; 2.5× that backward); "vs" columns are the peer's time over
kgen's (> 1: kgen is faster).

    python3 bench/compare_varlen.py                          # 16k and 64k tokens, d = 128, fwd and fwd+bwd
    python3 bench/compare_varlen.py --tokens 16k --mode fwd --out r.md
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kgen.torch  # noqa: E402
from compare_variants import time_round  # noqa: E402
from rounds import add_round_args, interleaved, size, write_table  # noqa: E402

REL_L2_BOUND = 2e-2
IMPLS = ("kgen", "dense", "fa4", "flex", "njt")


def lengths_for(tokens: int, mean: int, seed: int, sigma: float = 1.0) -> list[int]:
    draw = random.Random(seed)
    mu = math.log(mean) - sigma * sigma / 2
    out, total = [], 0
    while total < tokens:
        n = max(1, min(tokens - total, int(draw.lognormvariate(mu, sigma)) if sigma > 0 else mean))
        out.append(n)
        total += n
    return out


def reference(q, k, v, lengths, picks, causal=True):
    """fp32 o rows of the sequences `picks` (total, h, d layout), by index."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    out = {}
    for i in picks:
        s = slice(cu[i], cu[i + 1])
        qs, ks, vs = (t[s].float().transpose(0, 1) for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
        out[i] = (s, o.transpose(0, 1))
    return out


def rel_l2(a, b) -> float:
    return float((a.float() - b).norm() / b.norm().clamp_min(1e-30))


def make_runs(impls, q, k, v, lengths, mean, mode, causal=True):
    """{name: (forward callable returning o in (total, h, d), step callable)}."""
    total, h, d = q.shape
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device=q.device)
    longest = max(lengths)
    runs = {}
    grad = torch.randn_like(q)

    def with_backward(fwd, leaves):
        def step():
            o = fwd()
            torch.autograd.grad(o, leaves, grad)
        return step

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    if "kgen" in impls:
        def kgen_fwd(q=q, k=k, v=v):
            return kgen.torch.varlen_attention(q, k, v, cu, cu, longest, longest, causal=causal)
        runs["kgen"] = (kgen_fwd, with_backward(lambda: kgen_fwd(*leaves), leaves))
    if "dense" in impls:
        b = max(1, total // mean)
        qd, kd, vd = (torch.randn(b, mean, h, d, device=q.device, dtype=q.dtype) for _ in range(3))
        dl = [t.requires_grad_() for t in (qd.clone(), kd.clone(), vd.clone())]
        gd = torch.randn_like(qd)

        def dense_step():
            o = kgen.torch.attention(*dl, causal=causal, layout="bnhd")
            torch.autograd.grad(o, dl, gd)
        runs["dense"] = (None, dense_step) if mode == "bwd" else (
            lambda: kgen.torch.attention(qd, kd, vd, causal=causal, layout="bnhd"), dense_step)
    if "fa4" in impls:
        try:
            from flash_attn.cute import flash_attn_varlen_func  # noqa: PLC0415
        except Exception:  # noqa: BLE001 - not on this machine
            flash_attn_varlen_func = None
        if flash_attn_varlen_func is not None:
            def fa4_fwd(q=q, k=k, v=v):
                o = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                           max_seqlen_k=longest, causal=causal)
                return o[0] if isinstance(o, tuple) else o
            runs["fa4"] = (fa4_fwd, with_backward(lambda: fa4_fwd(*leaves), leaves))
    if "flex" in impls:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: PLC0415
        doc = torch.repeat_interleave(torch.arange(len(lengths), device=q.device),
                                      torch.tensor(lengths, device=q.device))

        def mask(b, hh, qi, ki):
            return (doc[qi] == doc[ki]) & ((ki <= qi) | (not causal))
        block_mask = create_block_mask(mask, 1, 1, total, total, device=q.device)
        flex = torch.compile(flex_attention)

        def flex_fwd(q=q, k=k, v=v):
            return flex(*(t.transpose(0, 1)[None] for t in (q, k, v)), block_mask=block_mask)[0].transpose(0, 1)
        runs["flex"] = (flex_fwd, with_backward(lambda: flex_fwd(*leaves), leaves))
    if "njt" in impls:
        offsets = cu.long()

        def nested(t):
            return torch.nested.nested_tensor_from_jagged(t, offsets, max_seqlen=longest).transpose(1, 2)

        def njt_fwd(q=q, k=k, v=v):
            o = torch.nn.functional.scaled_dot_product_attention(nested(q), nested(k), nested(v), is_causal=causal)
            return o.transpose(1, 2).values()
        runs["njt"] = (njt_fwd, with_backward(lambda: njt_fwd(*leaves), leaves))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="16k,64k", help="tokens per packed batch, comma-separated")
    ap.add_argument("--mean", type=int, default=1024, help="mean sequence length")
    ap.add_argument("--sigma", type=float, default=1.0, help="sigma of the lognormal lengths (0: every length --mean)")
    ap.add_argument("--head-dims", default="128", help="head dims, comma-separated (h·d = 2048)")
    ap.add_argument("--mode", default="fwd,fwdbwd", help="fwd and/or fwdbwd")
    ap.add_argument("--no-causal", dest="causal", action="store_false", help="attention without a mask")
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    add_round_args(ap, reps=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    impls = [i for i in args.impls.split(",") if i]
    torch.manual_seed(args.seed)
    lines = ["| tokens | seqs | d | mode | " + " | ".join(f"{i} ms" for i in impls) + " | kgen TFLOPS | " +
             " | ".join(f"vs {i}" for i in impls if i != "kgen") + " |",
             "|" + "---|" * (5 + 2 * len(impls)) ]
    for tokens in map(size, args.tokens.split(",")):
        lengths = lengths_for(tokens, args.mean, args.seed, args.sigma)
        for d in map(int, args.head_dims.split(",")):
            h = 2048 // d
            q, k, v = (torch.randn(tokens, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            runs = make_runs(impls, q, k, v, lengths, args.mean, "fwd", args.causal)
            picks = sorted({0, len(lengths) // 2, max(range(len(lengths)), key=lambda i: lengths[i])})
            ref = reference(q, k, v, lengths, picks, args.causal)
            status = {}
            for name, (fwd, _) in runs.items():
                if fwd is None or name == "dense":
                    status[name] = "ok"
                    continue
                try:
                    o = fwd()
                    errors = [rel_l2(o[s], r) for s, r in ref.values()]
                    status[name] = "ok" if max(errors) <= REL_L2_BOUND else f"FAIL {max(errors):.1e}"
                except Exception as e:  # noqa: BLE001 - a peer that does not serve the row
                    status[name] = "–"
                    print(f"{name}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            flops = 4.0 * sum(n * (n + 1) / 2 if args.causal else n * n for n in lengths) * h * d
            for mode in args.mode.split(","):
                timed = {name: (fwd if mode == "fwd" else step) for name, (fwd, step) in runs.items()
                         if status[name] == "ok"}
                times = interleaved(timed, time_round, args.reps, args.warmup, args.rounds)
                cell = {name: (f"{times[name][0]:.3f}" if name in times else status.get(name, "–")) for name in impls}
                kgen_ms = times.get("kgen", (math.nan,))[0]
                tflops = (flops * (1 if mode == "fwd" else 3.5)) / (kgen_ms * 1e-3) / 1e12
                ratios = [f"{times[i][0] / kgen_ms:.2f}" if i in times else "–" for i in impls if i != "kgen"]
                lines.append(f"| {tokens} | {len(lengths)} | {d} | {mode} | " + " | ".join(cell[i] for i in impls) +
                             f" | {tflops:.0f} | " + " | ".join(ratios) + " |")
                print(lines[-1], flush=True)
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
