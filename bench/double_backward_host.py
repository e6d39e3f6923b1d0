#!/usr/bin/env python3
"""Host time of the double backward's grad call (kgen.torch.attention, second autograd.grad).

At b = h = 1 the second grad call's time outside the kernels sits in front of the first kernel.
This prints, per head dim, the call's host time (perf_counter around one call, no
synchronisation inside) with the GPU idle before it and with the GPU busy (a spin kernel queued
first: a call that waited on the device would take as long as the spin), the same for the raw
operator kgen.torch.attention_double_backward, and torch.profiler's self CPU time per call of the
ops and driver calls that take the most.

    python3 bench/double_backward_host.py                   # d = 64, 128, 256, n = 8192, bf16
    python3 bench/double_backward_host.py --head-dims 128 --n 4096
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head-dims", default="64,128,256", help="comma-separated head dims")
    p.add_argument("--n", type=int, default=8192, help="sequence length (queries = keys)")
    p.add_argument("--reps", type=int, default=30, help="timed calls with the GPU idle (10 with it busy)")
    args = p.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import kgen.torch as kt

    if not torch.cuda.is_available():
        sys.exit("double_backward_host.py needs a CUDA device")
    torch.manual_seed(0)
    n = args.n
    for d in (int(x) for x in args.head_dims.split(",")):
        q, k, v, d_o, gq, gk, gv = (torch.randn(1, 1, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(7))
        ins = [t.detach().requires_grad_(True) for t in (q, k, v, d_o)]
        o = kt.attention(*ins[:3])
        first = torch.autograd.grad(o, ins[:3], ins[3], create_graph=True)

        def grad_call():
            return torch.autograd.grad(first, ins, (gq, gk, gv), retain_graph=True)

        def raw_op():  # its lse (zeros: the host path is what is timed) is allocated in the call
            return kt.attention_double_backward(q, k, v, o.detach(), torch.zeros(1, 1, n, device="cuda"), d_o, gq, gk,
                                                gv)

        for _ in range(10):
            grad_call()
            raw_op()
        torch.cuda.synchronize()
        for name, f in (("grad call", grad_call), ("raw op", raw_op)):
            idle = []
            for _ in range(args.reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                f()
                idle.append((time.perf_counter() - t0) * 1e3)
            busy = []
            for _ in range(10):
                torch.cuda.synchronize()
                torch.cuda._sleep(20_000_000)
                t0 = time.perf_counter()
                f()
                busy.append((time.perf_counter() - t0) * 1e3)
            idle.sort()
            busy.sort()
            print(f"d={d} {name}: host median {idle[len(idle) // 2]:.3f} ms idle-GPU, "
                  f"{busy[len(busy) // 2]:.3f} ms with the GPU busy")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                grad_call()
            torch.cuda.synchronize()
        rows = sorted((e for e in prof.key_averages() if e.self_cpu_time_total > 0),
                      key=lambda e: -e.self_cpu_time_total)
        for e in rows[:14]:
            print(f"    {e.self_cpu_time_total / 10 / 1000:.3f} ms self-cpu x{e.count // 10}  {e.key[:80]}")


if __name__ == "__main__":
    main()
