#!/usr/bin/env python3
"""Host time per call of kgen's PyTorch entry points against SDPA's, in one process: the rows of
issue 49's host-cost targets side by side.

Host time is what a call pays on the CPU: the wall time to enqueue --calls calls while the GPU is
held busy by a spin kernel (torch.cuda._sleep), so that no call waits for the GPU and the launch
queue never fills; the median over --reps such batches, per call. The GPU time per call comes
from CUDA events around the same batch (the kernels run back to back once the spin ends). Before
any timing, every output is checked against a float64 reference (and SDPA's).

Rows (every one against its SDPA row in the same table):
- decode forward, b = 1, h = --heads, n_q = 1, n_k in --n-k, d = --head-dim: kgen.torch's
  attention_forward (with and without out=, return_lse), attention, the dispatcher's operator and
  the kernel without the wrapper, against SDPA's default backend; LRPE at the same shape;
- fwd + bwd of one layer at the end-to-end benchmark's XL shape (b = 4, n = 512, h = 25, d = 64,
  causal, BNHD; a training step there is host-bound): kgen.torch.attention through autograd and
  its kernels alone, against SDPA's default and cuDNN paths;
- the double backward at b = 2, h = 2, n = 128, d = 64 (--double-shape): the second
  torch.autograd.grad of kgen.torch.attention against PyTorch's math path, host time and latency
  (CUDA events around one call from an idle GPU, the median of --reps calls: what
  bench/compare_attention_backward.py times); and what bounds it: the operator alone (no
  autograd), and torch.autograd.grad through a Function of the same inputs and outputs that does
  nothing (the autograd engine's own cost);
- fwd + bwd of a packed batch (--varlen: 16k tokens of lognormal lengths, mean 1k, h = 16,
  d = 128, causal; 20 calls a batch): kgen.torch.varlen_attention through autograd, FlashAttention's
  flash_attn_varlen_func on it, the kernels alone and the forward alone, against SDPA on nested
  jagged tensors.
A last table compares each target row with issue 49's target (host ≤ 1.0× SDPA's; the double
backward ≥ 10× faster than the math path).

    python3 bench/host_cost.py                       # the targets: decode h=8, n_k=512, d=128, bf16
    python3 bench/host_cost.py --n-k 512,4096 --heads 32 --calls 200 --reps 50
    python3 bench/host_cost.py --profile             # also torch.profiler's top CPU ops per target row
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rounds import sizes  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", type=int, default=8, help="heads of the decode rows")
    p.add_argument("--head-dim", type=int, default=128, help="head dim of the decode rows")
    p.add_argument("--n-k", type=sizes, default=[512], help="keys of the decode step (comma-separated, 1k = 1024)")
    p.add_argument("--double-shape", type=lambda t: tuple(int(x) for x in t.split(",")), default=(2, 2, 128, 64),
                   help="b,h,n,d of the double-backward rows")
    p.add_argument("--varlen", type=lambda t: tuple(int(x[:-1]) * 1024 if x.endswith("k") else int(x)
                                                    for x in t.split(",")), default=(16384, 1024, 16, 128),
                   help="tokens,mean length,heads,head dim of the packed rows (lognormal lengths, causal)")
    p.add_argument("--only", choices=("decode", "training", "double", "varlen"), action="append",
                   help="run these row groups only (repeatable; default all)")
    p.add_argument("--profile", action="store_true",
                   help="after the tables, torch.profiler's self CPU time per call of the top ops of each target row")
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


def time_calls(torch, fn, args, cycles_per_ms, calls=None):
    """(host µs per call samples, GPU µs per call samples, whether the GPU was held throughout);
    `calls` per batch (default --calls)."""
    calls = calls or args.calls
    host, gpu, held = [], [], True
    stream = torch.cuda.current_stream()
    for _ in range(args.reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(args.spin_ms * cycles_per_ms))
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        held = held and not stream.query()
        end.record()
        end.synchronize()
        host.append((t1 - t0) / calls * 1e6)
        gpu.append(start.elapsed_time(end) / calls * 1e3)
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
        rows = [(text, name, fn, checks(fn)) for name, fn in steps]

        # The two halves apart: the forward recording its node, and the backward alone (the grad
        # of a graph kept across calls), each against SDPA's default path.
        def sdpa_forward():
            return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)

        def kgen_forward():
            return kgen.torch.attention(q, k, v, causal=True, layout="bnhd")

        def backward_of(forward):
            o = forward()
            return lambda: (o, *torch.autograd.grad(o, (q, k, v), d_o, retain_graph=True))

        halves = text.replace("fwd+bwd", "halves")
        for name, fn in (("SDPA forward, graph recorded (default backend)", lambda: (sdpa_forward(),)),
                         ("kgen.torch.attention forward, graph recorded", lambda: (kgen_forward(),)),
                         ("SDPA backward alone (default backend)", backward_of(sdpa_forward)),
                         ("kgen.torch.attention backward alone", backward_of(kgen_forward))):
            rows.append((halves, name, fn, checks(fn)))
        return rows

    def lrpe_rows():
        x = torch.randn((1, h, 1, d), device="cuda", dtype=dtype, generator=g)
        theta = 10000.0 ** (-torch.arange(d, device="cuda", dtype=torch.float32) / d)
        theta2 = theta.expand(h, d).contiguous()
        position = 4095
        ref = lrpe_reference(x, theta2, offset=position)
        angles = (position * theta2)[:, None, :]
        cos, sin = torch.cos(angles), torch.sin(angles)
        kgen_check = [check_lrpe(kgen.torch.lrpe_cosine(x, theta2, offset=position), ref, dtype)]
        op_check = [check_lrpe(torch.ops.kgen.lrpe_cosine_forward(x, theta2, position, "none", "bhnd", None), ref,
                               dtype)]
        eager_check = [check_lrpe(torch.cat([x * cos, x * sin], dim=-1), ref, dtype, "eager o")]
        shape = f"b=1 h={h} n=1 d={d} {args.dtype}"
        return [(shape, name, fn, checks) for name, fn, checks in [
            ("kgen.torch.lrpe_cosine", lambda: kgen.torch.lrpe_cosine(x, theta2, offset=position), kgen_check),
            ("torch.ops.kgen.lrpe_cosine_forward (dispatcher)",
             lambda: torch.ops.kgen.lrpe_cosine_forward(x, theta2, position, "none", "bhnd", None), op_check),
            ("PyTorch eager (cached cos/sin, 3 ops)", lambda: torch.cat([x * cos, x * sin], dim=-1), eager_check),
        ]]

    def double_rows():
        """The second grad of attention (create_graph=True first) at --double-shape, kgen against
        PyTorch's math path, checked against each other and a float64 math run."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        b, heads, n, dd = args.double_shape
        q, k, v, d_o, *cotangents = (torch.randn((b, heads, n, dd), device="cuda", dtype=dtype, generator=g)
                                     for _ in range(7))

        def math_attention(q_, k_, v_):
            with sdpa_kernel([SDPBackend.MATH]):
                return sdpa(q_, k_, v_)

        def second_grad(attention, tensors, grads):
            ins = [t.detach().requires_grad_(True) for t in tensors]
            o = attention(*ins[:3])
            first = torch.autograd.grad(o, ins[:3], ins[3], create_graph=True)
            return lambda: torch.autograd.grad(first, ins, grads, retain_graph=True)

        reference = second_grad(math_attention, [t.double() for t in (q, k, v, d_o)],
                                [t.double() for t in cotangents])()
        steps = {"kgen": second_grad(kgen.torch.attention, (q, k, v, d_o), cotangents),
                 "math": second_grad(math_attention, (q, k, v, d_o), cotangents)}
        text = f"b={b} h={heads} n={n} d={dd} {args.dtype} 2nd grad"
        rows = []
        for name, label in (("math", "PyTorch math path, double backward (SDPA row of this shape)"),
                            ("kgen", "kgen.torch.attention double backward")):
            checks = [compare(f"{name} {part}", got, want, bound=2e-2)
                      for part, got, want in zip(("q_bar", "k_bar", "v_bar", "do_bar"), steps[name](), reference)]
            rows.append((text, label, steps[name], checks))
        # What bounds the kgen row: its operator alone (no autograd), and torch.autograd.grad
        # through a Function of the same inputs and outputs whose backward does nothing (returns
        # preallocated gradients: no kernel, no allocation).
        o, lse = kgen.torch.attention_forward(q, k, v, return_lse=True)
        raw = lambda: kgen.torch.attention_double_backward(q, k, v, o, lse, d_o, *cotangents)
        rows.append((text, "kgen.torch.attention_double_backward (the operator, no autograd)", raw,
                     [compare(f"raw {part}", got, want, bound=2e-2)
                      for part, got, want in zip(("q_bar", "k_bar", "v_bar", "do_bar"), raw(), reference)]))
        zeros = [torch.zeros_like(t) for t in (q, k, v, d_o)]

        class Nothing(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                return tuple(t.detach().clone() for t in inputs[:3])

            @staticmethod
            def backward(ctx, *grads):
                return tuple(zeros)

        ins = [t.detach().requires_grad_(True) for t in (q, k, v, d_o)]
        outs = Nothing.apply(*ins)
        rows.append((text, "autograd floor: torch.autograd.grad through a Function that does nothing",
                     lambda: torch.autograd.grad(outs, ins, cotangents, retain_graph=True), []))
        return rows

    def varlen_rows():
        """Forward + backward of a packed batch (lognormal lengths, as bench/compare_varlen.py
        draws them), kgen's entry points against SDPA on nested jagged tensors, each checked
        against a float64 run of every sequence."""
        from compare_varlen import lengths_for
        tokens, mean, heads, dd = args.varlen
        lengths = lengths_for(tokens, mean, seed=0)
        starts = [0]
        for n in lengths:
            starts.append(starts[-1] + n)
        cu, longest = torch.tensor(starts, dtype=torch.int32, device="cuda"), max(lengths)
        q, k, v = (torch.randn((tokens, heads, dd), device="cuda", dtype=dtype, generator=g).requires_grad_(True)
                   for _ in range(3))
        d_o = torch.randn((tokens, heads, dd), device="cuda", dtype=dtype, generator=g)
        refs = [torch.empty((tokens, heads, dd), device="cuda", dtype=torch.float64) for _ in range(4)]
        for i in range(len(lengths)):
            s = slice(starts[i], starts[i + 1])
            with torch.enable_grad():
                ins = [t.detach()[s].double().transpose(0, 1).requires_grad_(True) for t in (q, k, v)]
                o64 = sdpa(*ins, is_causal=True)  # n_q == n_k: top-left and bottom-right agree
                grads = torch.autograd.grad(o64, ins, d_o[s].double().transpose(0, 1))
            for ref, got in zip(refs, (o64, *grads)):
                ref[s] = got.detach().transpose(0, 1)

        def checks(step, parts=4):
            return [compare(name, got.detach(), want, bound=1e-2)
                    for name, got, want in zip(("o", "dq", "dk", "dv")[:parts], step(), refs)]

        import kgen.flash_attn_interface as fa

        def kgen_step():
            o = kgen.torch.varlen_attention(q, k, v, cu, cu, longest, longest, causal=True)
            return (o, *torch.autograd.grad(o, (q, k, v), d_o))

        def fa_step():
            o = fa.flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True)
            return (o, *torch.autograd.grad(o, (q, k, v), d_o))

        def kernels_only():
            o, lse = _kernels.varlen_attention_forward(q.detach(), k.detach(), v.detach(), cu, cu, longest, longest,
                                                       None, True)
            return (o, *_kernels.varlen_attention_backward(q.detach(), k.detach(), v.detach(), o, lse, d_o, cu, cu,
                                                           longest, longest, None, True)[:3])

        offsets = cu.long()

        def njt_step():
            def nested(t):
                return torch.nested.nested_tensor_from_jagged(t, offsets, max_seqlen=longest).transpose(1, 2)
            o = sdpa(nested(q), nested(k), nested(v), is_causal=True).transpose(1, 2).values()
            return (o, *torch.autograd.grad(o, (q, k, v), d_o))

        text = (f"packed {len(lengths)} sequences, {tokens} tokens (lognormal mean {mean}), h={heads} d={dd} causal "
                f"{args.dtype} fwd+bwd")
        rows = [(text, name, fn, checks(fn)) for name, fn in (
            ("SDPA fwd+bwd on nested jagged tensors (default backend)", njt_step),
            ("kgen.torch.varlen_attention fwd+bwd", kgen_step),
            ("kgen.flash_attn_interface.flash_attn_varlen_func fwd+bwd", fa_step),
            ("kgen kernels without autograd, fwd+bwd", kernels_only))]
        forward = lambda: (kgen.torch.varlen_attention(q.detach(), k.detach(), v.detach(), cu, cu, longest, longest,
                                                        causal=True),)
        rows.append((text, "kgen.torch.varlen_attention forward, no grad recorded", forward, checks(forward, 1)))
        return rows

    groups = args.only or ("decode", "training", "double", "varlen")
    rows = []
    if "decode" in groups:
        rows += [row for n_k in args.n_k for row in attention_rows(n_k)] + lrpe_rows()
    if "training" in groups:
        rows += training_rows()
    if "double" in groups:
        rows += double_rows()
    if "varlen" in groups:
        rows += varlen_rows()

    # "host vs SDPA": against the SDPA row above it (the LRPE rows against the decode shape's);
    # the double backward's rows also give their latency from an idle GPU.
    lines = ["| shape | call | host µs/call | host min | GPU µs/call | latency µs | host vs SDPA |",
             "|---|---|---|---|---|---|---|"]
    sdpa_host = sdpa_latency = None
    measured = {}
    for shape, name, fn, checks in rows:
        if not all(c.ok for c in checks):
            lines.append(f"| {shape} | {name} | FAIL: {'; '.join(str(c) for c in checks if not c.ok)} | | | | |")
            print(lines[-1], flush=True)
            continue
        for _ in range(3):
            fn()  # compile and cache kernels, warm the allocator
        torch.cuda.synchronize()
        double = "2nd grad" in shape
        # The math path's double backward launches dozens of kernels per call: 10 calls a batch
        # keep the launch queue from filling behind the spin.
        host, gpu, held = time_calls(torch, fn, args, cycles_per_ms,
                                     10 if double else 20 if "packed" in shape else None)
        median = statistics.median(host)
        latency = statistics.median(latencies(torch, fn, args.reps)) if double else None
        if name.startswith(("SDPA", "PyTorch math")):
            sdpa_host, sdpa_latency = median, latency
        measured[(shape, name)] = (median, latency)
        ratio = f"{median / sdpa_host:.2f}×" if sdpa_host else ""
        note = "" if held else " (GPU idle before the batch was enqueued: raise --spin-ms)"
        lat = "" if latency is None else f"{latency:.1f}"
        if latency is not None and sdpa_latency and not name.startswith("PyTorch math"):
            lat += f" ({sdpa_latency / latency:.1f}× faster)"
        lines.append(f"| {shape} | {name} | {median:.1f} | {min(host):.1f} | {statistics.median(gpu):.1f}{note} | "
                     f"{lat} | {ratio} |")
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))
    print("\n" + "\n".join(target_table(args, measured)))
    if args.profile:
        profile_rows(torch, [r for r in rows if (r[0], r[1]) in measured and is_target(r[1])], args)


TARGETS = (  # (call of the row, its reference row, what is compared, issue 49's bound)
    ("kgen.torch.attention fwd+bwd", "SDPA fwd+bwd (default backend)", "host", 1.0),
    ("kgen.torch.attention_forward", "SDPA (default backend)", "host", 1.0),
    ("kgen.torch.varlen_attention fwd+bwd", "SDPA fwd+bwd on nested jagged tensors (default backend)", "host", 1.0),
    ("kgen.torch.attention double backward", "PyTorch math path, double backward (SDPA row of this shape)",
     "latency", 10.0),
)


def is_target(name: str) -> bool:
    return any(name in (t[0], t[1]) for t in TARGETS)


def target_table(args, measured) -> list:
    """Issue 49's targets: each kgen row against its reference row of the same shape."""
    lines = ["| target | shape | kgen | reference | ratio | bound | met |", "|---|---|---|---|---|---|---|"]
    for call, reference, what, bound in TARGETS:
        for (shape, name), (host, latency) in measured.items():
            if name != call or (shape, reference) not in measured:
                continue
            ref_host, ref_latency = measured[(shape, reference)]
            if what == "host":
                ratio, met = host / ref_host, host / ref_host <= bound
                cells = f"{host:.1f} µs host | {ref_host:.1f} µs host | {ratio:.2f}× SDPA's | ≤ {bound:g}×"
            else:
                ratio, met = ref_latency / latency, ref_latency / latency >= bound
                cells = f"{latency:.1f} µs | {ref_latency:.1f} µs | {ratio:.1f}× faster | ≥ {bound:g}×"
            lines.append(f"| {call} | {shape} | {cells} | {'yes' if met else 'no'} |")
    return lines


def latencies(torch, fn, reps):
    """µs of each of `reps` calls from an idle GPU, CUDA events around the call (host time until
    the last launch, then the GPU's tail)."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return out


def profile_rows(torch, rows, args):
    """torch.profiler's self CPU time per call of the ops that take the most, for each row."""
    from torch.profiler import ProfilerActivity, profile
    calls = 50
    for shape, name, fn, _ in rows:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        events = sorted((e for e in prof.key_averages() if e.self_cpu_time_total > 0),
                        key=lambda e: -e.self_cpu_time_total)
        print(f"\n{shape} | {name}: self CPU µs per call (profiler on)")
        for e in events[:12]:
            print(f"  {e.self_cpu_time_total / calls:8.1f}  {e.count / calls:5.1f}×  {e.key}")


if __name__ == "__main__":
    main()
