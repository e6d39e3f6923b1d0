#!/usr/bin/env python3
"""Where one attention backward call's time goes: kgen against cuDNN (through SDPA), kernel by kernel.

For each shape both implementations' gradients are checked against the fp32 math-path reference
(bench/compare_attention_backward.py's, on sampled heads) before anything is timed. Then, per
implementation (kgen: kgen.torch.attention_backward into preallocated outputs; cuDNN:
torch.autograd.grad of SDPA's output under SDPBackend.CUDNN_ATTENTION):

  sync ms    median of calls each followed by a synchronize, as compare_attention_backward.py
             times them: the host time before the first kernel counts;
  b2b ms     median per call of 20 calls queued back to back behind a spin kernel: GPU time only;
  host µs    enqueue time per call while the GPU is held busy;
  kernels    the GPU time of each kernel of one call (torch.profiler).

    python3 bench/backward_kernels.py
    python3 bench/backward_kernels.py --shapes 16,16,1024,128,causal 2,16,8192,128,full
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import kgen.torch  # noqa: E402
from compare_attention_backward import BOUND, backward_reference, checks_ok, compare, fmt_checks, timed  # noqa: E402

DEFAULT_SHAPES = ["16,16,1024,128,causal", "64,16,512,128,causal", "16,32,1024,64,full", "1,16,1000,96,full"]


def shape(text: str):
    """b,h,n,d,causal|full"""
    try:
        b, h, n, d, mask = text.split(",")
        if mask not in ("causal", "full"):
            raise ValueError
        return int(b), int(h), int(n), int(d), mask == "causal"
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shapes: expected b,h,n,d,causal|full, got {text!r}") from None


def timed_back_to_back(fn, calls=20, rounds=5):
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        torch.cuda._sleep(int(50e6))  # the calls queue up behind it
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def host_us(fn, calls=20, rounds=5):
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(200e6))  # holds the GPU, so no call waits for it
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def kernel_times(fn):
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(e.name, e.device_time_total) for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", type=shape, default=[shape(s) for s in DEFAULT_SHAPES],
                   help=f"b,h,n,d,causal|full (default: {' '.join(DEFAULT_SHAPES)})")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--reps", type=int, default=20, help="synchronised calls per median")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("backward_kernels.py: no CUDA device")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{args.dtype}")
    for b, h, n, d, causal in args.shapes:
        gen = torch.Generator(device="cuda").manual_seed(n + d)
        q, k, v, d_o = (torch.randn(b, h, n, d, device="cuda", dtype=dt, generator=gen) for _ in range(4))
        ref = backward_reference(q, k, v, d_o, causal)
        o, lse = kgen.torch.attention_forward(q, k, v, causal=causal, return_lse=True)
        outs = [torch.full_like(t, float("nan")) for t in (q, k, v)]

        def run_kgen():
            kgen.torch.attention_backward(q, k, v, o, lse, d_o, causal=causal, dq=outs[0], dk=outs[1], dv=outs[2])
            return outs

        ins = [t.detach().requires_grad_(True) for t in (q, k, v)]
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o_cudnn = F.scaled_dot_product_attention(*ins, is_causal=causal)

        def run_cudnn():
            return torch.autograd.grad(o_cudnn, ins, d_o, retain_graph=True)

        print(f"\n== b {b}, h {h}, n {n}, d {d}, {'causal' if causal else 'no mask'}")
        for name, fn in (("kgen", run_kgen), ("cudnn", run_cudnn)):
            grads = fn()
            torch.cuda.synchronize()
            checks = [compare(nm, g[:1, :r.shape[1]].double(), r.double(), bound=BOUND)
                      for nm, g, r in zip(("dq", "dk", "dv"), grads, ref)]
            if not checks_ok(checks):
                print(f"{name}: FAIL {fmt_checks(checks)} (not timed)")
                continue
            print(f"{name}: sync {timed(fn, 3, args.reps):.3f} ms, b2b {timed_back_to_back(fn):.3f} ms, "
                  f"host {host_us(fn):.1f} µs")
            for kname, us in kernel_times(fn):
                print(f"    {us:8.1f} µs  {kname[:90]}")


if __name__ == "__main__":
    main()
