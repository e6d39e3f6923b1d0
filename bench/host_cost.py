#!/usr/bin/env python3
"""Host time per call of kgen's PyTorch entry points against SDPA's default path, at decode shapes.

What a decode step pays on the CPU for each call: the wall time to enqueue --calls calls while
the GPU is held busy by a spin kernel (torch.cuda._sleep), so that no call waits for the GPU and
the launch queue never fills; the median over --reps such batches, per call. The GPU time per
call comes from CUDA events around the same batch (the kernels run back to back once the spin
ends). Before any timing, every attention output is checked against SDPA's and a float64
reference, every LRPE output against the float64 formulation.

    python3 bench/host_cost.py                       # b=1, h=32, n_q=1, n_k=4096, d=128, bf16
    python3 bench/host_cost.py --n-k 512,8192 --calls 200 --reps 50

It also times one attention layer's forward + backward at a training shape (the end-to-end
benchmark's XL model at context 512, where a step is host-bound): kgen's differentiable
attention, its kernels without autograd, and SDPA's default and cuDNN paths.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path


def sizes(text):
    return [int(x[:-1]) * 1024 if x.lower().endswith("k") else int(x) for x in text.split(",")]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--n-k", type=sizes, default=[4096], help="keys of the decode step (comma-separated, 1k = 1024)")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--calls", type=int, default=100, help="calls per timed batch (the GPU queue holds them all)")
    p.add_argument("--reps", type=int, default=30, help="timed batches per row")
    p.add_argument("--spin-ms", type=float, default=40.0, help="how long the spin kernel holds the GPU")
    return p.parse_args()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def time_calls(torch, fn, args, cycles_per_ms):
    """(host µs per call samples, GPU µs per call samples, whether the GPU was held throughout)."""
    host, gpu, held = [], [], True
    stream = torch.cuda.current_stream()
    for _ in range(args.reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(args.spin_ms * cycles_per_ms))
        start.record()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn()
        t1 = time.perf_counter()
        held = held and not stream.query()
        end.record()
        end.synchronize()
        host.append((t1 - t0) / args.calls * 1e6)
        gpu.append(start.elapsed_time(end) / args.calls * 1e3)
    return host, gpu, held


def spin_rate(torch) -> float:
    """torch.cuda._sleep cycles per millisecond on this GPU, measured."""
    cycles = 10_000_000
    torch.cuda._sleep(cycles)  # warm
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("host_cost.py needs PyTorch")
    if not torch.cuda.is_available():
        sys.exit("host_cost.py needs a CUDA GPU")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import kgen
    import kgen.torch
    from kgen import _kernels
    from kgen.testing import attention_reference, check_attention, check_lrpe, compare, lrpe_reference

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    h, d = args.heads, args.head_dim
    g = torch.Generator(device="cuda").manual_seed(0)
    cycles_per_ms = spin_rate(torch)
    print(f"device: {torch.cuda.get_device_name()} | CPU: {cpu_name()} | torch {torch.__version__} | "
          f"kgen {kgen.__version__} | Python {platform.python_version()}")
    print(f"{args.calls} calls per batch, median of {args.reps} batches; host = wall time to enqueue while the GPU "
          f"is held by a {args.spin_ms:g} ms spin; GPU = CUDA events over the batch\n")

    def attention_rows(n_k):
        """The attention rows at n_k keys (each in its own scope: the lambdas keep its tensors)."""
        q = torch.randn((1, h, 1, d), device="cuda", dtype=dtype, generator=g)
        k = torch.randn((1, h, n_k, d), device="cuda", dtype=dtype, generator=g)
        v = torch.randn((1, h, n_k, d), device="cuda", dtype=dtype, generator=g)
        out = torch.empty_like(q)
        o_ref, lse_ref = attention_reference(q, k, v)
        kgen_checks = check_attention(*kgen.torch.attention_forward(q, k, v, return_lse=True), o_ref, lse_ref, dtype)
        sdpa_check = [compare("SDPA o", sdpa(q, k, v), o_ref, bound=1e-2)]
        op_check = [compare("torch.ops.kgen o", torch.ops.kgen.attention_forward(q, k, v, None, False, "bhnd")[0],
                            o_ref, bound=1e-2)]
        shape = f"b=1 h={h} n_q=1 n_k={n_k} d={d} {args.dtype}"
        return [(shape, name, fn, checks) for name, fn, checks in [
            ("SDPA (default backend)", lambda: sdpa(q, k, v), sdpa_check),
            ("kgen.torch.attention_forward", lambda: kgen.torch.attention_forward(q, k, v), kgen_checks),
            ("kgen.torch.attention_forward(out=)", lambda: kgen.torch.attention_forward(q, k, v, out=out), kgen_checks),
            ("kgen.torch.attention_forward(return_lse=True)",
             lambda: kgen.torch.attention_forward(q, k, v, return_lse=True), kgen_checks),
            ("kgen.torch.attention (no grad recorded)", lambda: kgen.torch.attention(q, k, v), kgen_checks),
            ("torch.ops.kgen.attention_forward (dispatcher)",
             lambda: torch.ops.kgen.attention_forward(q, k, v, None, False, "bhnd"), op_check),
            ("kgen kernel without the wrapper",
             lambda: _kernels.attention_forward(q, k, v, None, False, "bhnd", False), kgen_checks),
        ]]

    def training_rows():
        """Forward + backward of one attention layer at the end-to-end benchmark's XL shape
        (b = 4, n = 512, h = 25, d = 64, causal, BNHD), where a training step is host-bound."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        shape = (4, 512, 25, 64)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=g).requires_grad_(True) for _ in range(3))
        d_o = torch.randn(shape, device="cuda", dtype=dtype, generator=g)

        def kgen_step():
            o = kgen.torch.attention(q, k, v, causal=True, layout="bnhd")
            return (o, *torch.autograd.grad(o, (q, k, v), d_o))

        def sdpa_step(backend=None):
            def run():
                o = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
                return (o, *torch.autograd.grad(o, (q, k, v), d_o))
            if backend is None:
                return run
            def forced():
                with sdpa_kernel(backend):
                    return run()
            return forced

        def kernels_only():
            o, lse = _kernels.attention_forward(q.detach(), k.detach(), v.detach(), None, True, "bnhd", True)
            return (o, *_kernels.attention_backward(q.detach(), k.detach(), v.detach(), o, lse, d_o, None, True, "bnhd"))

        with torch.no_grad():
            q64, k64, v64 = (t.detach().double().transpose(1, 2).requires_grad_(True) for t in (q, k, v))
        with torch.enable_grad():
            o64 = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
            refs = (o64, *torch.autograd.grad(o64, (q64, k64, v64), d_o.double().transpose(1, 2)))
        refs = [r.detach().transpose(1, 2) for r in refs]

        def checks(step):
            return [compare(name, got.detach(), want, bound=1e-2)
                    for name, got, want in zip(("o", "dq", "dk", "dv"), step(), refs)]

        text = "b=4 n=512 h=25 d=64 causal bnhd " + args.dtype + " fwd+bwd"
        steps = [("SDPA fwd+bwd (default backend)", sdpa_step()),
                 ("cuDNN through SDPA, fwd+bwd", sdpa_step(SDPBackend.CUDNN_ATTENTION)),
                 ("kgen.torch.attention fwd+bwd", kgen_step),
                 ("kgen kernels without autograd, fwd+bwd", kernels_only)]
        return [(text, name, fn, checks(fn)) for name, fn in steps]

    rows = [row for n_k in args.n_k for row in attention_rows(n_k)]
    x = torch.randn((1, h, 1, d), device="cuda", dtype=dtype, generator=g)
    theta = 10000.0 ** (-torch.arange(d, device="cuda", dtype=torch.float32) / d)
    theta2 = theta.expand(h, d).contiguous()
    position = 4095
    ref = lrpe_reference(x, theta2, offset=position)
    angles = (position * theta2)[:, None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)
    kgen_check = [check_lrpe(kgen.torch.lrpe_cosine(x, theta2, offset=position), ref, dtype)]
    op_check = [check_lrpe(torch.ops.kgen.lrpe_cosine_forward(x, theta2, position, "none", "bhnd", None), ref, dtype)]
    eager_check = [check_lrpe(torch.cat([x * cos, x * sin], dim=-1), ref, dtype, "eager o")]
    shape = f"b=1 h={h} n=1 d={d} {args.dtype}"
    rows += [(shape, name, fn, checks) for name, fn, checks in [
        ("kgen.torch.lrpe_cosine", lambda: kgen.torch.lrpe_cosine(x, theta2, offset=position), kgen_check),
        ("torch.ops.kgen.lrpe_cosine_forward (dispatcher)",
         lambda: torch.ops.kgen.lrpe_cosine_forward(x, theta2, position, "none", "bhnd", None), op_check),
        ("PyTorch eager (cached cos/sin, 3 ops)", lambda: torch.cat([x * cos, x * sin], dim=-1), eager_check),
    ]]

    rows += training_rows()
    # "host vs SDPA": against the SDPA row above it (the LRPE rows against the decode shape's)
    lines = ["| shape | call | host µs/call | host min | GPU µs/call | host vs SDPA |", "|---|---|---|---|---|---|"]
    sdpa_host = None
    for shape, name, fn, checks in rows:
        if not all(c.ok for c in checks):
            lines.append(f"| {shape} | {name} | FAIL: {'; '.join(str(c) for c in checks if not c.ok)} | | | |")
            continue
        for _ in range(3):
            fn()  # compile and cache kernels, warm the allocator
        torch.cuda.synchronize()
        host, gpu, held = time_calls(torch, fn, args, cycles_per_ms)
        median = statistics.median(host)
        if name.startswith("SDPA"):
            sdpa_host = median
        ratio = f"{median / sdpa_host:.2f}×" if sdpa_host else ""
        note = "" if held else " (GPU idle before the batch was enqueued: raise --spin-ms)"
        lines.append(f"| {shape} | {name} | {median:.1f} | {min(host):.1f} | {statistics.median(gpu):.1f}{note} | "
                     f"{ratio} |")
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
