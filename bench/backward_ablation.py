#!/usr/bin/env python3
"""Times one backward config of the kgen library that KGEN_LIBRARY names, for ablation builds.

To place time inside one kernel without hardware counters, build libkgen with one stage of the
kernel left out or changed (templates edited, `cmake --build build`, the library copied aside),
then run this script once per library, alternating, in one machine session, and take the
differences. A library with a stage left out computes wrong gradients, so `--no-check` skips the
check that the default runs first (dq, dk, dv of every shape's first two heads against the
fp32 math path, docs/attention.md §5.2 bounds); rows timed without it say so.

    KGEN_LIBRARY=$PWD/dist/lib/libkgen.so PYTHONPATH=$PWD/python \\
        python3 bench/backward_ablation.py --config wg:bm64:bn128:a2 --label baseline
    KGEN_LIBRARY=/tmp/no-dq-adds/libkgen.so KGEN_CACHE_DIR=/tmp/c1 PYTHONPATH=$PWD/python \\
        python3 bench/backward_ablation.py --config wg:bm64:bn128:a2 --label "no dQ adds" --no-check

Shapes: bf16, n_q = n_k = --seqlen, b = 16384 / n, h = 2048 / d rounded down (the standard grid);
with --head-dim-v, v, o and dO have that head dim (MLA). Backward FLOPs: 2·b·h·n²·(3·d + 2·d_v),
halved for causal (2.5 × the forward's 4·b·h·n²·d when d_v = d). Prints one line per shape: label, head
dim, causal, median ms of --reps CUDA-event-timed calls after --warmup, TFLOPS, check.
Give every library its own KGEN_CACHE_DIR: the binary cache keys on the rendered source, and an
ablation build's source differs, but separate caches keep the runs independent of each other.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import kgen.torch  # noqa: E402
from kgen.testing import attention_math, compare  # noqa: E402
from compare_attention_backward import timed  # noqa: E402

BOUND = 1e-2  # rel_l2 of 16-bit gradients against the fp32 reference (docs/attention.md §5.2)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="backward config, e.g. wg:bm64:bn128:a2")
    ap.add_argument("--label", default="", help="name printed on every row (the build)")
    ap.add_argument("--head-dims", default="64,128", help="comma-separated head dims (default 64,128)")
    ap.add_argument("--head-dim-v", type=int, default=0, help="v's head dim when below q's (MLA; default: d)")
    ap.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    ap.add_argument("--seqlen", type=int, default=4096, help="n_q = n_k (default 4096)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-check", action="store_true",
                    help="time without checking the gradients first (builds with a stage left out)")
    args = ap.parse_args(argv)
    for name in ("seqlen", "warmup", "reps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    try:
        args.head_dims = [int(d) for d in args.head_dims.split(",")]
    except ValueError:
        ap.error(f"--head-dims: expected comma-separated integers, got {args.head_dims!r}")
    if any(d <= 0 or d > 2048 for d in args.head_dims):
        ap.error(f"--head-dims: each must be in 1..2048, got {args.head_dims}")
    if args.head_dim_v < 0 or any(args.head_dim_v > d for d in args.head_dims):
        ap.error(f"--head-dim-v: must be in 0..min(head dims), got {args.head_dim_v}")
    if 16384 % args.seqlen:
        ap.error(f"--seqlen must divide b·n = 16384, got {args.seqlen}")
    return args


def check(q, k, v, do, grads, causal):
    """Worst rel_l2 of (dq, dk, dv) on heads 0-1 of batch 0 against the fp32 math path."""
    sl = (slice(0, 1), slice(0, 2))
    leaves = [x[sl].detach().float().requires_grad_() for x in (q, k, v)]
    o = attention_math(*leaves, causal=causal)
    ref = torch.autograd.grad(o, leaves, do[sl].float())
    checks = [compare(name, g[sl], r, bound=BOUND) for name, g, r in zip(("dq", "dk", "dv"), grads, ref)]
    worst = max(checks, key=lambda c: c.rel_l2)
    return all(c.ok for c in checks), f"{worst.name} rel_l2 {worst.rel_l2:.1e}"


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("backward_ablation.py: needs a CUDA device")
    torch.manual_seed(0)
    causals = {"yes": (True,), "no": (False,), "both": (False, True)}[args.causal]
    n = args.seqlen
    for d in args.head_dims:
        for causal in causals:
            b, h = 16384 // n, 2048 // d
            dv = args.head_dim_v or d
            q, k = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            v, do = (torch.randn(b, h, n, dv, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            o, lse = kgen.torch.attention_forward(q, k, v, causal=causal, return_lse=True)

            def run():
                return kgen.torch.attention_backward(q, k, v, o, lse, do, causal=causal, config=args.config)

            status = "not checked"
            if not args.no_check:
                ok, status = check(q, k, v, do, run(), causal)
                if not ok:
                    print(f"{args.label}\td={d}\tcausal={int(causal)}\tFAIL ({status}): not timed", flush=True)
                    continue
            ms = timed(run, args.warmup, args.reps)
            flops = 2 * b * h * n * n * (3 * d + 2 * dv) * (0.5 if causal else 1.0)
            print(f"{args.label}\td={d}/{dv}\tcausal={int(causal)}\t{ms:.3f} ms\t{flops / ms / 1e9:.0f} TFLOPS\t{status}",
                  flush=True)


if __name__ == "__main__":
    main()
