#!/usr/bin/env python3
"""One forward call of kgen and one of each peer (SDPA's cuDNN backend; FlashAttention-4 where
installed) per row, for Nsight Compute.

Each row's inputs are made once; both outputs are checked against the float64 reference on
sampled heads (docs/attention.md §5) and the row stops with an error if either fails. Then both
run a few warm-up calls, and one call of each runs between cudaProfilerStart and
cudaProfilerStop, so that `ncu --profile-from-start off` sees exactly those kernels (each peer's,
and kgen's forward: one kernel, or two with a split-key combine).

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python3 bench/profile_forward.py --rows 128:yes:256:64x16,128:no:1024:16x16

Rows are d:causal:n:b x h (causal yes/no; queries = keys, h_kv = h). Without ncu it prints the
checks and each call's CUDA-event time, which is not a benchmark (one call, no rounds).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

SAMPLED_HEADS = 2


def parse_row(text):
    try:
        d, causal, n, bh = text.split(":")
        b, h = bh.split("x")
        if causal not in ("yes", "no"):
            raise ValueError
        return int(d), causal == "yes", int(n), int(b), int(h)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not d:causal:n:bxh (e.g. 128:yes:256:64x16)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", required=True, type=lambda s: [parse_row(r) for r in s.split(",")],
                   help="comma-separated d:causal:n:bxh rows, e.g. 128:yes:256:64x16")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--warmup", type=int, default=3, help="calls of each before the profiled one")
    p.add_argument("--impls", default="kgen,cudnn",
                   help="comma-separated: kgen, cudnn, fa4 (flash_attn.cute's flash_attn_func, where installed)")
    args = p.parse_args()
    impls = [x.strip() for x in args.impls.split(",") if x.strip()]
    unknown = sorted(set(impls) - {"kgen", "cudnn", "fa4"})
    if unknown:
        p.error(f"--impls: unknown {', '.join(unknown)} (kgen, cudnn, fa4)")

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import kgen.torch
    from kgen.testing import attention_reference, check_attention

    if not torch.cuda.is_available():
        sys.exit("profile_forward.py needs a CUDA device")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fa4 = None
    if "fa4" in impls:
        try:
            from flash_attn.cute import flash_attn_func as fa4  # noqa: PLC0415
        except ImportError:
            sys.exit("--impls fa4: flash_attn.cute is not installed here (../shared/tools/fa4 installs it)")
    for d, causal, n, b, h in args.rows:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))

        def run_kgen():
            return kgen.torch.attention_forward(q, k, v, causal=causal, return_lse=False)

        def run_cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def run_fa4():  # (b, n, h, d) layout in and out
            o = fa4(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal)
            return (o[0] if isinstance(o, tuple) else o).transpose(1, 2)

        runs = [(name, run) for name, run in (("kgen", run_kgen), ("cudnn", run_cudnn), ("fa4", run_fa4))
                if name in impls]
        o_ref, _ = attention_reference(q[:1, :SAMPLED_HEADS], k[:1, :SAMPLED_HEADS], v[:1, :SAMPLED_HEADS],
                                       causal=causal)
        for name, run in runs:
            o = run()
            checks = check_attention(o[:1, :SAMPLED_HEADS], None, o_ref, None, dtype)
            if not all(c.ok for c in checks):
                sys.exit(f"{name} d={d} causal={causal} n={n} b={b} h={h}: check failed: {checks}")
            for _ in range(args.warmup):
                run()
        torch.cuda.synchronize()
        times = {}
        for name, run in runs:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.profiler.start()
            start.record()
            run()
            end.record()
            torch.cuda.profiler.stop()
            torch.cuda.synchronize()
            times[name] = start.elapsed_time(end)
        print(f"d={d} causal={'yes' if causal else 'no'} n={n} b={b} h={h}: all checked; one call "
              + ", ".join(f"{k_} {t:.3f} ms" for k_, t in times.items()), flush=True)


if __name__ == "__main__":
    main()
