#!/usr/bin/env python3
"""One forward call of kgen and one of SDPA's cuDNN backend per row, for Nsight Compute.

Each row's inputs are made once; both outputs are checked against the float64 reference on
sampled heads (docs/attention.md §5) and the row stops with an error if either fails. Then both
run a few warm-up calls, and one call of each runs between cudaProfilerStart and
cudaProfilerStop, so that `ncu --profile-from-start off` sees exactly those kernels (cuDNN's,
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
    args = p.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import kgen.torch
    from kgen.testing import attention_reference, check_attention

    if not torch.cuda.is_available():
        sys.exit("profile_forward.py needs a CUDA device")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    for d, causal, n, b, h in args.rows:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))

        def run_kgen():
            return kgen.torch.attention_forward(q, k, v, causal=causal, return_lse=False)

        def run_cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        o_ref, _ = attention_reference(q[:1, :SAMPLED_HEADS], k[:1, :SAMPLED_HEADS], v[:1, :SAMPLED_HEADS],
                                       causal=causal)
        for name, run in (("kgen", run_kgen), ("cudnn", run_cudnn)):
            o = run()
            checks = check_attention(o[:1, :SAMPLED_HEADS], None, o_ref, None, dtype)
            if not all(c.ok for c in checks):
                sys.exit(f"{name} d={d} causal={causal} n={n} b={b} h={h}: check failed: {checks}")
            for _ in range(args.warmup):
                run()
        torch.cuda.synchronize()
        times = {}
        for name, run in (("kgen", run_kgen), ("cudnn", run_cudnn)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.profiler.start()
            start.record()
            run()
            end.record()
            torch.cuda.profiler.stop()
            torch.cuda.synchronize()
            times[name] = start.elapsed_time(end)
        print(f"d={d} causal={'yes' if causal else 'no'} n={n} b={b} h={h}: both checked; one call "
              + ", ".join(f"{k_} {t:.3f} ms" for k_, t in times.items()), flush=True)


if __name__ == "__main__":
    main()
